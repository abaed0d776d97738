# Sourced by hack/ scripts: the pinned versions (the go.mod files under hack/tools/ are the source of truth) and
# the cache directory the binaries live in.
KUBERNETES_VERSION=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/kubernetes/go.mod")
ETCD_VERSION=$(awk '$1=="require" && $2=="go.etcd.io/etcd/server/v3" {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/etcd/go.mod")
HELM_VERSION=$(awk '$1=="require" && $2=="helm.sh/helm/v3" {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/helm/go.mod")

# The cache directory is keyed by every pin, so changing one builds into a fresh directory.
trainguard_bin_dir() {
  if [[ -n "${TRAINGUARD_BIN_DIR:-}" ]]; then echo "$TRAINGUARD_BIN_DIR"; return; fi
  local sum
  sum=$(cat "$(dirname "${BASH_SOURCE[0]}")"/tools/*/go.mod | sha256sum | cut -c1-8)
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/bin/k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}_${sum}"
}
