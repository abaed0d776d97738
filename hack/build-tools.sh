#!/usr/bin/env bash
# Builds the pinned Kubernetes control plane, etcd, kubectl, helm, kwok and the JobSet controller from the Go
# modules under hack/tools/, and copies the upstream CRD manifests (JobSet, Kueue, scheduler-plugins PodGroup) and
# the apiserver's OpenAPI v3 documents out of the Go module cache. Everything lands in a cache directory outside
# the repo:
#   ${TRAINGUARD_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/bin/<version>}
# Idempotent: whatever is already there is skipped. Prints the directory as its last line.
# trainer-manager (upstream Kubeflow Trainer's own manager, the parity suite's peer) goes to a directory of its own,
#   ${TRAINGUARD_PEER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/peer/trainer-<version>_<sha8 of its go.mod>}
# so that pinning it does not change the key of the directory above; its CRDs, runtimes and examples are read from
# the Go module cache at run time (tests/parity/), not copied.
#
# usage: hack/build-tools.sh [all|control-plane|e2e|node|TOOL...]   (TOOL: kube-apiserver kube-controller-manager
#        kube-scheduler kubectl etcd helm crds openapi kwok jobset kueue trainer-manager; default: all)
#   e2e: what hack/e2e-cluster.sh runs (the control plane plus kube-controller-manager, kube-scheduler, kwok and
#        the JobSet controller); kwok also copies its upstream Stage manifests, jobset its webhook and RBAC config.
#   node: the real node's binaries (runc, containerd + ctr + shim, CNI plugins, kubelet, kube-proxy, buildkitd +
#        buildctl) into a directory of their own, $(trainguard_node_dir) (hack/versions.sh says what is there),
#        keyed by hack/tools/node/*/go.mod and hack/tools/kubernetes/go.mod; installs the Debian packages the
#        builds need first (hack/deps.sh node). Not part of `all`: `make test` never builds it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"

if ! command -v go >/dev/null 2>&1; then
  echo "build-tools: Go is not installed (need go >= 1.26 on PATH); install it from your distribution or https://go.dev/dl/" >&2
  exit 1
fi

# go_needed TARGET...: the highest `go` directive of the modules the targets build (the node's modules only for
# `node`). Under GOTOOLCHAIN=local an older Go fails deep inside a build with a vague error; refuse it up front.
# Cheap on purpose (reads go.mod files, runs `go version`): this runs on every make test.
go_needed() {
  local mods=("$here"/tools/*/go.mod)
  [[ " $* " != *" node "* ]] || mods+=("$here"/tools/node/*/go.mod)
  sed -n 's/^go \([0-9][0-9.]*\)[[:space:]]*$/\1/p' "${mods[@]}" | sort -V | tail -n 1
}
go_found=$(go version | sed -n 's/^go version go\([0-9][0-9.]*\).*/\1/p')
go_need=$(go_needed "$@")
if [[ -z $go_found || $(printf '%s\n%s\n' "$go_need" "$go_found" | sort -V | head -n 1) != "$go_need" ]]; then
  echo "build-tools: Go $go_need or newer is needed (the go directive of hack/tools/*/go.mod, built with GOTOOLCHAIN=local); found ${go_found:-an unreadable version}: $(go version); install it from https://go.dev/dl/" >&2
  exit 1
fi

bin_dir=$(trainguard_bin_dir)
peer_dir=$(trainguard_peer_dir)
node_dir=$(trainguard_node_dir)
mkdir -p "$bin_dir"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod -trimpath" GOTOOLCHAIN=local

log() { printf 'build-tools: %s\n' "$*" >&2; }

# build MODULE_DIR OUTPUT PACKAGE [DIR]: go build one command into the cache (DIR, default $bin_dir), timing it.
build() {
  local mod=$1 out=$2 pkg=$3 dir=${4:-$bin_dir}
  if [[ -x "$dir/$out" ]]; then log "$out: cached"; return; fi
  log "$out: building $pkg (module hack/tools/$mod) ..."
  local start=$SECONDS
  # Kubernetes binaries report their version (/version, kubectl version): unstamped they say v0.0.0-master+$Format:%H$,
  # which version-checking clients cannot parse (Kueue's manager exits on it).
  local ldflags='-s -w'; [[ $mod != kubernetes ]] || ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
  mkdir -p "$dir"
  (cd "$here/tools/$mod" && go build -ldflags="$ldflags" -o "$dir/$out.tmp" "$pkg")
  mv "$dir/$out.tmp" "$dir/$out"
  log "$out: built in $((SECONDS - start)) s"
}

# module_dir MODULE_DIR MODULE_PATH: where the Go module cache holds the version MODULE_DIR's go.mod pins.
module_dir() {
  (cd "$here/tools/$1" && go mod download -json "$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}

copy_crds() {
  local dest=$bin_dir/crds
  if [[ -f "$dest/.complete" ]]; then log "crds: cached"; return; fi
  log "crds: copying upstream CRDs from the Go module cache ..."
  rm -rf "$dest" && mkdir -p "$dest/jobset" "$dest/kueue" "$dest/scheduler-plugins"
  local d
  d=$(module_dir crds sigs.k8s.io/jobset)
  cp "$d"/config/components/crd/bases/*.yaml "$dest/jobset/"
  d=$(module_dir crds sigs.k8s.io/kueue)
  cp "$d"/config/components/crd/bases/*.yaml "$dest/kueue/"
  d=$(module_dir crds sigs.k8s.io/scheduler-plugins)
  cp "$d"/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml "$dest/scheduler-plugins/"
  chmod -R u+w "$dest"
  touch "$dest/.complete"
}

# copy_from_module MODULE_DIR MODULE_PATH NAME SRC_SUBDIR...: upstream manifests a built tool needs at run time,
# copied out of the Go module cache into $bin_dir/NAME/<subdir> (kwok's Stage objects, JobSet's webhook and RBAC).
copy_from_module() {
  local mod=$1 path=$2 name=$3; shift 3
  local dest=$bin_dir/$name
  if [[ -f "$dest/.complete" ]]; then log "$name: cached"; return; fi
  log "$name: copying $* from $path ..."
  rm -rf "$dest" && mkdir -p "$dest"
  local d sub
  d=$(module_dir "$mod" "$path")
  for sub in "$@"; do mkdir -p "$dest/$sub" && cp -R "$d/$sub/." "$dest/$sub/"; done
  chmod -R u+w "$dest"
  touch "$dest/.complete"
}

copy_openapi() {
  local dest=$bin_dir/openapi
  if [[ -f "$dest/.complete" ]]; then log "openapi: cached"; return; fi
  log "openapi: copying the apiserver's OpenAPI v3 documents from k8s.io/kubernetes ..."
  rm -rf "$dest" && mkdir -p "$dest"
  local d
  d=$(module_dir kubernetes k8s.io/kubernetes)
  cp "$d"/api/openapi-spec/v3/api__v1_openapi.json "$dest/"
  chmod -R u+w "$dest"
  touch "$dest/.complete"
}

# node_build MODULE OUTPUT PACKAGE TAGS CGO [LDFLAGS]: go build one of the node's commands from hack/tools/node/MODULE
# into $node_dir (tags and cgo as upstream's Makefiles build them).
node_build() {
  local mod=$1 out=$2 pkg=$3 tags=$4 cgo=$5 ldflags="-s -w ${6:-}"
  if [[ -x "$node_dir/$out" ]]; then log "$out: cached"; return; fi
  log "$out: building $pkg (module hack/tools/node/$mod) ..."
  local start=$SECONDS
  mkdir -p "$(dirname "$node_dir/$out")"
  (cd "$here/tools/node/$mod" && CGO_ENABLED=$cgo go build -mod=readonly -tags "$tags" -ldflags="$ldflags" -o "$node_dir/$out.tmp" "$pkg")
  mv "$node_dir/$out.tmp" "$node_dir/$out"
  log "$out: built in $((SECONDS - start)) s"
}

# node_kube OUTPUT: kubelet or kube-proxy from hack/tools/kubernetes's go.mod, unchanged. Its go.sum covers the
# control plane only, so the build reads a copy completed with hack/tools/node/kubernetes.sum (-modfile), and
# -mod=readonly makes a missing or different pin an error rather than an edit.
node_kube() {
  local out=$1
  if [[ -x "$node_dir/$out" ]]; then log "$out: cached"; return; fi
  log "$out: building k8s.io/kubernetes/cmd/$out (module hack/tools/kubernetes) ..."
  local start=$SECONDS tmp
  tmp=$(mktemp -d)
  cp "$here/tools/kubernetes/go.mod" "$tmp/go.mod"
  grep -hv '^#' "$here/tools/kubernetes/go.sum" "$here/tools/node/kubernetes.sum" | sort -u > "$tmp/go.sum"
  mkdir -p "$node_dir"
  (cd "$here/tools/kubernetes" && CGO_ENABLED=0 go build -mod=readonly -modfile="$tmp/go.mod" \
    -ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION" \
    -o "$node_dir/$out.tmp" "k8s.io/kubernetes/cmd/$out") || { rm -rf "$tmp"; return 1; }
  rm -rf "$tmp"
  mv "$node_dir/$out.tmp" "$node_dir/$out"
  log "$out: built in $((SECONDS - start)) s"
}

node() {
  "$here/deps.sh" node
  local v
  v=$(node_module_version runc github.com/opencontainers/runc)
  # runc's Makefile: CGO (libcontainer's nsenter), seccomp from libseccomp
  node_build runc runc github.com/opencontainers/runc seccomp 1 "-X main.version=${v#v}"
  v=$(node_module_version containerd github.com/containerd/containerd/v2)
  local cv="-X github.com/containerd/containerd/v2/version.Version=$v"
  node_build containerd containerd github.com/containerd/containerd/v2/cmd/containerd "urfave_cli_no_docs no_btrfs" 0 "$cv"
  node_build containerd ctr github.com/containerd/containerd/v2/cmd/ctr "urfave_cli_no_docs no_btrfs" 0 "$cv"
  node_build containerd containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 "urfave_cli_no_docs no_grpc" 0 "$cv"
  local p
  for p in main/bridge main/loopback ipam/host-local meta/portmap; do
    node_build cni "cni/${p#*/}" "github.com/containernetworking/plugins/plugins/$p" "" 0
  done
  node_kube kubelet
  node_kube kube-proxy
  v=$(node_module_version buildkit github.com/moby/buildkit)
  node_build buildkit buildkitd github.com/moby/buildkit/cmd/buildkitd "" 0 "-X github.com/moby/buildkit/version.Version=$v"
  node_build buildkit buildctl github.com/moby/buildkit/cmd/buildctl "" 0 "-X github.com/moby/buildkit/version.Version=$v"
}

one() {
  case $1 in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) build kubernetes "$1" "k8s.io/kubernetes/cmd/$1" ;;
    etcd) build etcd etcd . ;;
    helm) build helm helm helm.sh/helm/v3/cmd/helm ;;
    kueue) build kueue kueue . ;;
    crds) copy_crds ;;
    openapi) copy_openapi ;;
    kwok)
      build kwok kwok sigs.k8s.io/kwok/cmd/kwok
      copy_from_module kwok sigs.k8s.io/kwok kwok-manifests kustomize/stage ;;
    jobset)
      build jobset jobset-controller sigs.k8s.io/jobset
      copy_from_module jobset sigs.k8s.io/jobset jobset-manifests config/components/webhook config/components/rbac ;;
    trainer-manager)
      build trainer trainer-controller-manager github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager "$peer_dir"
      # the module's own files (CRDs, runtimes, examples) are read from the module cache: make sure it holds them
      module_dir trainer github.com/kubeflow/trainer/v2 >/dev/null ;;
    node) node ;;
    *) echo "build-tools: unknown tool '$1'" >&2; exit 2 ;;
  esac
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(all)
total_start=$SECONDS
for t in "${targets[@]}"; do
  case $t in
    # everything `make test` runs (up front, so a cold build never happens inside a test fixture)
    all) for x in etcd kube-apiserver kubectl helm crds openapi kube-controller-manager kube-scheduler kwok jobset kueue trainer-manager; do one "$x"; done ;;
    control-plane) for x in etcd kube-apiserver kubectl crds openapi; do one "$x"; done ;;
    e2e) for x in etcd kube-apiserver kubectl crds openapi kube-controller-manager kube-scheduler kwok jobset; do one "$x"; done ;;
    *) one "$t" ;;
  esac
done
log "done in $((SECONDS - total_start)) s"
if [[ " ${targets[*]} " == *" node "* ]]; then echo "$node_dir"; else echo "$bin_dir"; fi
