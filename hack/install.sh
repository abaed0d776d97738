#!/usr/bin/env bash
# Install (or upgrade) trainguard on the cluster of the current kubeconfig: JobSet's CRDs (server-side apply: the
# chart does not own them; jobset.install=true installs JobSet's controller too), then the chart, which creates and
# owns trainguard's and Kubeflow Trainer's CRDs. Applying crds/ first and then installing the chart with its CRDs
# fails with "invalid ownership metadata" (the CRDs exist without Helm's labels): a cluster whose CRDs are managed
# elsewhere passes --set crds.enabled=false and applies crds/ itself before each upgrade.
# hack/kind.sh runs this; tests/integration/chart/test_install_script.py runs it against the local control plane.
#
# usage: hack/install.sh [helm upgrade --install flags...]   (e.g. --wait, --set image.tag=dev, -f values.yaml)
# env:   KUBECONFIG / KUBE_CONTEXT select the cluster; TRAINGUARD_NAMESPACE (trainguard-system); TRAINGUARD_BIN_DIR
#        (kubectl, helm and crds/jobset; default: what hack/build-tools.sh builds)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
namespace=${TRAINGUARD_NAMESPACE:-trainguard-system}
bin=${TRAINGUARD_BIN_DIR:-$("$here/build-tools.sh" kubectl helm crds | tail -n 1)}
kubectl=("$bin/kubectl") helm=("$bin/helm")
if [[ -n ${KUBE_CONTEXT:-} ]]; then kubectl+=(--context "$KUBE_CONTEXT"); helm+=(--kube-context "$KUBE_CONTEXT"); fi

echo "install.sh: JobSet CRDs (server-side apply)" >&2
"${kubectl[@]}" apply --server-side --force-conflicts -f "$bin/crds/jobset/" >&2
echo "install.sh: helm upgrade --install trainguard -n $namespace (the chart owns trainguard's and Trainer's CRDs)" >&2
"${helm[@]}" upgrade --install trainguard "$repo/charts/trainguard" --namespace "$namespace" --create-namespace "$@"
