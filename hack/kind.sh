#!/usr/bin/env bash
# The path for users WITH a Docker engine: a kind cluster, the trainguard image built and loaded into it, the CRDs
# and the Helm chart installed by hack/install.sh. The test suite does not run kind (machines without Docker run
# hack/cluster.sh); the install sequence itself is tested against the local control plane.
#
# usage: hack/kind.sh [up|down]   (needs docker and kind on PATH; helm and kubectl come from hack/build-tools.sh)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
name=${KIND_CLUSTER_NAME:-trainguard}
image=${TRAINGUARD_IMAGE:-trainguard:dev}

command -v docker >/dev/null || { echo "kind.sh: docker is required (no Docker engine? use 'make demo' instead)" >&2; exit 1; }
command -v kind >/dev/null || { echo "kind.sh: kind is required: go install sigs.k8s.io/kind@v0.30.0" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "kind.sh: the Docker engine is not running" >&2; exit 1; }

bin=$("$here/build-tools.sh" kubectl helm crds | tail -n 1)
case ${1:-up} in
  up)
    kind get clusters | grep -qx "$name" || kind create cluster --name "$name"
    docker build -t "$image" "$repo"
    kind load docker-image "$image" --name "$name"
    ctx="kind-$name"
    # The install order that works (the chart owns the CRDs), the one tests/integration/chart/test_install_script.py
    # checks against the local control plane.
    KUBE_CONTEXT=$ctx TRAINGUARD_BIN_DIR=$bin "$here/install.sh" \
      --set image.repository="${image%:*}" --set image.tag="${image##*:}" --set image.pullPolicy=Never --wait
    echo "trainguard is running in kind cluster '$name' (kubectl --context $ctx -n trainguard-system get pods)"
    ;;
  down) kind delete cluster --name "$name" ;;
  *) echo "usage: hack/kind.sh [up|down]" >&2; exit 2 ;;
esac
