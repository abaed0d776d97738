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

# The real node's binaries (hack/build-tools.sh node; hack/node.sh and hack/images.sh run them), in a cache
# directory of their own keyed by the node modules' go.mod files and the kubernetes module's (kubelet and kube-proxy
# come from hack/tools/kubernetes), so pinning them never changes trainguard_bin_dir's key and `make test` never
# builds them. Interface (what other scripts may rely on), all in $(trainguard_node_dir):
#   runc                                   runc v1.5.3 (CGO, seccomp)
#   containerd ctr containerd-shim-runc-v2 containerd v2.4.2
#   kubelet kube-proxy                     Kubernetes $KUBERNETES_VERSION
#   buildkitd buildctl                     BuildKit v0.34.2 (hack/images.sh only)
#   cni/bridge cni/host-local cni/loopback cni/portmap   CNI plugins v1.10.0 (containerd's CNI bin_dirs = cni/)
TRAINGUARD_NODE_MODULES=(runc containerd cni buildkit)
node_module_version() {  # MODULE PATH: the version hack/tools/node/MODULE/go.mod requires of PATH
  awk -v p="$2" '$1=="require" && $2==p {print $3}' "$(dirname "${BASH_SOURCE[0]}")/tools/node/$1/go.mod"
}
trainguard_node_dir() {
  if [[ -n "${TRAINGUARD_NODE_DIR:-}" ]]; then echo "$TRAINGUARD_NODE_DIR"; return; fi
  local sum m tools
  tools=$(dirname "${BASH_SOURCE[0]}")/tools
  sum=$({ for m in "${TRAINGUARD_NODE_MODULES[@]}"; do cat "$tools/node/$m/go.mod"; done
          cat "$tools/kubernetes/go.mod" "$tools/node/kubernetes.sum"; } | sha256sum | cut -c1-8)
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/node/k8s-${KUBERNETES_VERSION}_containerd-$(node_module_version containerd github.com/containerd/containerd/v2)_runc-$(node_module_version runc github.com/opencontainers/runc)_${sum}/bin"
}
