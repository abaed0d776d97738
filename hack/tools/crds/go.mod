// Pins the upstream CRD manifests the tests install (JobSet, Kueue, scheduler-plugins PodGroup). Nothing is
// compiled here: hack/build-tools.sh downloads these module versions and copies their CRD YAML into the cache,
// so the repo never carries hand-written copies.
module github.com/trainguard/trainguard/hack/tools/crds

go 1.25.0

require (
	// The JobSet version Kubeflow Trainer v2.3 builds against.
	sigs.k8s.io/jobset v0.12.0
	sigs.k8s.io/kueue v0.17.0
	sigs.k8s.io/scheduler-plugins v0.32.7
)
