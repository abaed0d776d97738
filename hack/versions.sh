# Sourced by hack/ scripts: the pinned versions (the go.mod files under hack/tools/ are the source of truth) and
# the cache directory the binaries live in.
KUBERNETES_VERSION=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/kubernetes/go.mod")
ETCD_VERSION=$(awk '$1=="require" && $2=="go.etcd.io/etcd/server/v3" {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/etcd/go.mod")
HELM_VERSION=$(awk '$1=="require" && $2=="helm.sh/helm/v3" {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/helm/go.mod")

# The modules whose binaries and manifests share the cache directory below, in the order the key hashes them.
# A tool module not listed here (hack/tools/trainer, the parity suite's peer) has a directory of its own, keyed by
# its own go.mod, so adding one does not rebuild everything.
TRAINGUARD_BIN_MODULES=(crds etcd helm jobset kubernetes kueue kwok)

# The cache directory is keyed by every pin, so changing one builds into a fresh directory.
trainguard_bin_dir() {
  if [[ -n "${TRAINGUARD_BIN_DIR:-}" ]]; then echo "$TRAINGUARD_BIN_DIR"; return; fi
  local sum m tools
  tools=$(dirname "${BASH_SOURCE[0]}")/tools
  sum=$(for m in "${TRAINGUARD_BIN_MODULES[@]}"; do cat "$tools/$m/go.mod"; done | sha256sum | cut -c1-8)
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/bin/k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}_${sum}"
}

# Upstream Kubeflow Trainer's manager (the parity suite's peer): its own cache directory, keyed by the version and
# hack/tools/trainer/go.mod alone.
TRAINER_VERSION=$(awk '$1=="require" && $2=="github.com/kubeflow/trainer/v2" {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/trainer/go.mod")
trainguard_peer_dir() {
  if [[ -n "${TRAINGUARD_PEER_DIR:-}" ]]; then echo "$TRAINGUARD_PEER_DIR"; return; fi
  local sum
  sum=$(sha256sum < "$(dirname "${BASH_SOURCE[0]}")/tools/trainer/go.mod" | cut -c1-8)
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/peer/trainer-${TRAINER_VERSION}_${sum}"
}
