"""Typed models of every API object trainguard reads or writes (pydantic v2, lossless round trips).

Modules:

* ``base``       KubeModel (camelCase aliases, unknown fields kept, ``parse``/``dump``), ``spec_field``/``rule``
                 (CRD facts attached to fields: ``hack/gen_crds.py`` turns trainguard.io's into ``crds/``; the
                 trainer.kubeflow.org CRDs are upstream's, and the facts on those models must equal theirs)
* ``quantity``   Kubernetes resource quantities: exact parse, Go rounding (``2500m`` -> 3), sums, scaling
* ``meta``       ObjectMeta, OwnerReference, Condition, LabelSelector (+ ``label_selector_matches``)
* ``core``       embedded core/batch types: PodTemplateSpec, PodSpec, Container, EnvVar, ResourceRequirements...
* ``trainer``    trainer.kubeflow.org/v1alpha1 TrainJob, TrainingRuntime, ClusterTrainingRuntime (v2.3 shape)
* ``jobset``     jobset.x-k8s.io/v1alpha2 JobSet (what the reconciler builds and reads)
* ``trainguard`` trainguard.io/v1alpha1 TrainJobPolicy (cluster-scoped) and DatasetCache (namespaced)
* ``constants``  reserved names, labels, annotations, defaults and limits
* ``views``      read-only typed views over the wire dicts (TrainJob, runtimes, the JobSet template down to the
                 containers, the runtimeRef rule): the one place each field of those objects is read
* ``apimachinery`` metav1 time formatting and parsing, controller owner references
"""
