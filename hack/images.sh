#!/usr/bin/env bash
# The container images a real node runs (hack/node.sh), built here from the Debian mirror apt uses, the Go module
# cache and PyPI: no registry, no Docker engine.
#
#   hack/images.sh build [IMAGE...]   build what is missing or stale (default: all four, in the order below)
#   hack/images.sh load [IMAGE...]    build if needed, then import into the node's containerd (namespace k8s.io)
#   hack/images.sh status             each image: name, manifest digest, cache directory, size, loaded or not
#   hack/images.sh dir IMAGE          the OCI layout directory of IMAGE's current build (empty if not built)
#
# Interface (hack/node.sh, tests/node/ and anything else may rely on it):
#   image            name                                   what
#   pause            localhost/trainguard/pause:3.10        k8s build/pause/linux/pause.c, gcc -Os -static; USER 65535
#   base             localhost/trainguard/base:bookworm     debootstrap minbase bookworm + python3, python3-venv,
#                                                           python-is-python3, ca-certificates; the host's CA bundle
#                                                           and pip index settings (hack/pip_config.py); also the
#                                                           Dockerfiles' FROM (python:3.11-slim-bookworm) here
#   trainguard       localhost/trainguard/trainguard:dev    the project's Dockerfile, unmodified, built by BuildKit;
#                                                           ENTRYPOINT trainguard, USER 65532; runs `trainguard
#                                                           --version` as part of the build
#   trainer          localhost/trainguard/trainer:dev       tests/node/images/trainer.Dockerfile: the base + the project
#                                                           (pip --no-deps) in /opt/trainer, on PATH: a trainer
#                                                           container can `from trainguard.cache.client import ...`
#   containerd socket: $TRAINGUARD_NODE_CONTAINERD_SOCK (default /run/trainguard-node/containerd/containerd.sock)
#   cache: $TRAINGUARD_IMAGES_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/images), one directory per
#     image and key, <image>-<key>/ holding layout/ (an OCI image layout) and digest; the key (hack/image_key.py)
#     hashes the image's inputs (for trainguard: Dockerfile, locks, pyproject, README, webhook/, controller/; the
#     base's key; the BuildKit version), so a code change rebuilds it and nothing else does. Older keys of the same
#     image are removed after a build. BuildKit's layer cache: buildkit-cache/<image>/ beside them (the
#     Dockerfiles install the pinned dependencies before copying the code, so a code change reuses that layer).
#   binaries: $(trainguard_node_dir) (hack/build-tools.sh node builds them when missing: runc, buildkitd, buildctl,
#     ctr).
#
# BuildKit runs only while this script builds: buildkitd is started with the built runc, host networking (the
# Dockerfile's `pip install` reaches the index as the host does) and a temporary state directory, and is stopped
# afterwards; its mounts and cgroups are removed and the directory deleted, also when the build fails. Needs root
# (debootstrap, buildkitd).
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"

log() { printf 'images: %s\n' "$*" >&2; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }

IMAGES=(pause base trainguard trainer)
declare -A NAME=(
  [pause]=localhost/trainguard/pause:3.10
  [base]=localhost/trainguard/base:bookworm
  [trainguard]=localhost/trainguard/trainguard:dev
  [trainer]=localhost/trainguard/trainer:dev
)
# The Dockerfiles' FROM: the base is supplied under this name as a named build context, so the Dockerfile builds
# here unmodified and still builds with Docker, where the name means the Docker Hub image.
DOCKERFILE_BASE=python:3.11-slim-bookworm
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
BASE_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
BASE_CMD='["python3"]'
# upstream's Makefile: CFLAGS = -Os -Wall -Werror -static -DVERSION=v$(TAG)-$(REV), then strip
PAUSE_CFLAGS=(-Os -Wall -Werror -static)

cache=${TRAINGUARD_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/images}
sock=${TRAINGUARD_NODE_CONTAINERD_SOCK:-/run/trainguard-node/containerd/containerd.sock}
node_dir=$(trainguard_node_dir)
py=${PYTHON:-python3}

# mirror: the Debian mirror apt is configured with (deb822 .sources first, then one-line sources.list).
mirror() {
  local m
  m=$(awk 'tolower($1)=="uris:" {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n $m ]] || m=$(awk '$1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1 || true)
  [[ -n $m ]] || die "no Debian mirror in /etc/apt/sources.list{,.d}; set TRAINGUARD_DEBIAN_MIRROR"
  echo "$m"
}

k8s_module_dir() {
  (cd "$here/tools/kubernetes" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json k8s.io/kubernetes \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}

buildkit_version() { node_module_version buildkit github.com/moby/buildkit; }

# key IMAGE: the cache key of IMAGE's current inputs (hack/image_key.py plus the facts outside the repository).
declare -A KEY=()
key() {
  local image=$1 facts=()
  if [[ -n ${KEY[$image]:-} ]]; then echo "${KEY[$image]}"; return; fi
  case $image in
    base)
      local ca pipconf
      ca=$("$py" "$here/pip_config.py" --ca-bundle)
      pipconf=$("$py" "$here/pip_config.py" | sha256sum | cut -c1-16)
      facts=(--with "suite=$SUITE" --with "packages=$BASE_PACKAGES" --with "env=${BASE_ENV[*]}" --with "cmd=$BASE_CMD"
             --with "mirror=${TRAINGUARD_DEBIAN_MIRROR:-$(mirror)}"
             --with "ca=$( [[ -n $ca ]] && sha256sum <"$ca" | cut -c1-16)" --with "pipconf=$pipconf"
             --with "arch=$(uname -m)") ;;
    pause)
      facts=(--with "kubernetes=$KUBERNETES_VERSION" --with "cflags=${PAUSE_CFLAGS[*]}"
             --with "gcc=$(gcc -dumpfullversion 2>/dev/null || echo none)") ;;
    trainguard|trainer)
      facts=(--with "base=$(key base)" --with "buildkit=$(buildkit_version)") ;;
  esac
  KEY[$image]=$("$py" "$here/image_key.py" "$image" "${facts[@]}")
  echo "${KEY[$image]}"
}

image_dir() { echo "$cache/$1-$(key "$1")"; }

# Temporary directories, removed (after unmounting anything left under them) when the script exits, however it exits.
tmp_paths=()
new_tmp() {  # new_tmp VAR [PARENT]: a fresh directory in VAR
  local -n _dir=$1
  _dir=$(mktemp -d "${2:-${TMPDIR:-/tmp}}/trainguard-images.XXXXXX")
  tmp_paths+=("$_dir")
}
on_exit() {
  stop_buildkitd
  local p
  for p in "${tmp_paths[@]}"; do umount_under "$p"; rm -rf "$p"; done
}
trap on_exit EXIT
built() { [[ -f "$(image_dir "$1")/digest" ]]; }

# finish IMAGE DIGEST: mark IMAGE's directory complete and drop the older builds of the same image.
finish() {
  local image=$1 dir
  dir=$(image_dir "$image")
  "$py" "$here/oci_layout.py" check "$dir/layout" || die "$image: the layout in $dir fails its own check"
  echo "$2" > "$dir/digest"
  local old
  for old in "$cache/$image"-*; do
    [[ $old == "$dir" || ! -d $old ]] || { log "$image: removing the stale build $old"; rm -rf "$old"; }
  done
}

build_base() {
  local dir tmp start=$SECONDS mirror_url
  dir=$(image_dir base)
  mirror_url=${TRAINGUARD_DEBIAN_MIRROR:-$(mirror)}
  log "base: debootstrap --variant=minbase $SUITE from $mirror_url (about 90 s) ..."
  rm -rf "$dir" && mkdir -p "$dir"
  # debootstrap mounts /proc and /sys inside the target while it configures packages: on_exit unmounts whatever
  # is left there if it fails, before deleting the directory
  new_tmp tmp "$cache"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$tmp/rootfs" "$mirror_url" \
    > "$dir/debootstrap.log" 2>&1 || { tail -n 20 "$dir/debootstrap.log" >&2; die "base: debootstrap failed (log: $dir/debootstrap.log)"; }
  umount_under "$tmp/rootfs"
  rm -rf "$tmp/rootfs"/var/cache/apt/archives/*.deb "$tmp/rootfs"/var/lib/apt/lists/* "$tmp/rootfs"/var/log/*.log \
    "$tmp/rootfs"/var/cache/ldconfig/aux-cache
  # the host's trust and index settings, so `pip install` inside a build downloads what the host can
  local ca
  ca=$("$py" "$here/pip_config.py" --ca-bundle)
  if [[ -n $ca ]]; then install -m 0644 "$ca" "$tmp/rootfs/etc/ssl/certs/ca-certificates.crt"; fi
  "$py" "$here/pip_config.py" > "$tmp/pip.conf"
  if [[ -s $tmp/pip.conf ]]; then install -m 0644 "$tmp/pip.conf" "$tmp/rootfs/etc/pip.conf"; fi
  local env_args=() e digest
  for e in "${BASE_ENV[@]}"; do env_args+=(--env "$e"); done
  digest=$("$py" "$here/oci_layout.py" image --rootfs "$tmp/rootfs" --layout "$dir/layout" --name "${NAME[base]}" \
    "${env_args[@]}" --cmd "$BASE_CMD" --history "debootstrap --variant=minbase --include=$BASE_PACKAGES $SUITE")
  finish base "$digest"
  umount_under "$tmp"; rm -rf "$tmp"
  log "base: built in $((SECONDS - start)) s ($(du -sh "$dir/layout" | cut -f1))"
}

build_pause() {
  local dir tmp start=$SECONDS src tag digest
  dir=$(image_dir pause)
  src=$(k8s_module_dir)
  [[ -f $src/build/pause/linux/pause.c ]] || die "pause: no build/pause/linux/pause.c in $src"
  tag=$(awk '$1=="TAG" && $2=="?=" {print $3}' "$src/build/pause/Makefile")
  log "pause: gcc -Os -static $src/build/pause/linux/pause.c (upstream tag $tag) ..."
  rm -rf "$dir" && mkdir -p "$dir"
  new_tmp tmp
  mkdir -p "$tmp/rootfs"
  gcc "${PAUSE_CFLAGS[@]}" "-DVERSION=v$tag-kubernetes-$KUBERNETES_VERSION" -o "$tmp/rootfs/pause" \
    "$src/build/pause/linux/pause.c"
  strip "$tmp/rootfs/pause"
  "$tmp/rootfs/pause" -v >/dev/null || die "pause: the built binary does not run"
  digest=$("$py" "$here/oci_layout.py" image --rootfs "$tmp/rootfs" --layout "$dir/layout" --name "${NAME[pause]}" \
    --entrypoint '["/pause"]' --user 65535:65535 --env PATH=/ --history "gcc -Os -static pause.c ($tag)")
  finish pause "$digest"
  rm -rf "$tmp"
  log "pause: built in $((SECONDS - start)) s"
}

# umount_under DIR: lazily unmount every mount point at or under DIR, deepest first.
umount_under() {
  local d=$1 m
  [[ -n $d ]] || return 0
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(
    awk -v d="$d" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

bk_state="" bk_pid="" bk_cgroups=()
start_buildkitd() {
  [[ -z $bk_pid ]] || return 0
  local h
  # buildkitd's runc puts build containers in cgroup "buildkit" of every hierarchy: note which exist already
  for h in /sys/fs/cgroup/*/buildkit /sys/fs/cgroup/buildkit; do [[ -d $h ]] && bk_cgroups+=("$h"); done
  bk_state=$(mktemp -d /tmp/trainguard-buildkit.XXXXXX)
  log "buildkitd $(buildkit_version): starting (state $bk_state) ..."
  "$node_dir/buildkitd" --root "$bk_state/root" --addr "unix://$bk_state/buildkitd.sock" \
    --oci-worker=true --oci-worker-binary "$node_dir/runc" --oci-worker-net host --containerd-worker=false \
    > "$bk_state/buildkitd.log" 2>&1 &
  bk_pid=$!
  local i
  for i in $(seq 1 100); do
    "$node_dir/buildctl" --addr "unix://$bk_state/buildkitd.sock" debug workers >/dev/null 2>&1 && return 0
    kill -0 "$bk_pid" 2>/dev/null || { cat "$bk_state/buildkitd.log" >&2; die "buildkitd exited"; }
    sleep 0.3
  done
  cat "$bk_state/buildkitd.log" >&2
  die "buildkitd did not answer in 30 s"
}

stop_buildkitd() {
  [[ -n $bk_state ]] || return 0
  if [[ -n $bk_pid ]] && kill -0 "$bk_pid" 2>/dev/null; then
    kill "$bk_pid" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do kill -0 "$bk_pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$bk_pid" 2>/dev/null || true
    wait "$bk_pid" 2>/dev/null || true
  fi
  umount_under "$bk_state"
  # cgroups buildkit created (empty once its containers are gone): deepest first; ones that existed are kept
  local h keep c
  for h in /sys/fs/cgroup/*/buildkit /sys/fs/cgroup/buildkit; do
    [[ -d $h ]] || continue
    keep=""
    for c in "${bk_cgroups[@]}"; do [[ $c == "$h" ]] && keep=1; done
    [[ -n $keep ]] && continue
    find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || log "could not remove cgroup $h (still in use?)"
  done
  rm -rf "$bk_state"
  bk_state="" bk_pid=""
}

# buildctl_build IMAGE DOCKERFILE_DIR FILENAME: build IMAGE with BuildKit from the repository as context, the base
# layout as the FROM image, into IMAGE's layout directory; the layer cache is read from buildkit-cache/ and
# written anew (only what this build references is kept).
buildctl_build() {
  local image=$1 dfdir=$2 file=$3 dir base_dir base_digest start=$SECONDS
  dir=$(image_dir "$image")
  base_dir=$(image_dir base)
  base_digest=$(<"$base_dir/digest")
  start_buildkitd
  rm -rf "$dir" && mkdir -p "$dir"
  # one layer cache per image: each export keeps only what its own build referenced
  local bkc=$cache/buildkit-cache/$image
  local cache_args=(--export-cache "type=local,dest=$bkc.new,mode=max")
  [[ -f $bkc/index.json ]] && cache_args+=(--import-cache "type=local,src=$bkc")
  log "$image: building $file with BuildKit (FROM $DOCKERFILE_BASE = ${NAME[base]}) ..."
  if ! "$node_dir/buildctl" --addr "unix://$bk_state/buildkitd.sock" build --progress plain \
      --frontend dockerfile.v0 --local context="$repo" --local dockerfile="$dfdir" --opt filename="$file" \
      --oci-layout "base=$base_dir/layout" \
      --opt "context:$DOCKERFILE_BASE=oci-layout://base:${NAME[base]##*:}@$base_digest" \
      --output "type=oci,dest=$dir/layout,tar=false,name=${NAME[$image]}" \
      "${cache_args[@]}" > "$dir/build.log" 2>&1; then
    tail -n 30 "$dir/build.log" >&2
    die "$image: build failed (log: $dir/build.log)"
  fi
  rm -rf "$bkc" && mv "$bkc.new" "$bkc"
  local digest
  digest=$("$py" "$here/oci_layout.py" names "$dir/layout" | awk -v n="${NAME[$image]}" '$1==n {print $2}')
  [[ -n $digest ]] || die "$image: the output layout does not name ${NAME[$image]}"
  echo "$digest" > "$dir/.digest"
  log "$image: built in $((SECONDS - start)) s"
}

# smoke IMAGE COMMAND...: run COMMAND in IMAGE (its user, its PATH) under BuildKit's runc; print its output.
smoke() {
  local image=$1; shift
  local dir tmp digest
  dir=$(image_dir "$image")
  digest=$(<"$dir/.digest")
  new_tmp tmp
  # exec form through sh, so the arguments need no shell quoting and the output lands in a file to export
  local run
  run=$("$py" -c 'import json, sys; print(json.dumps(["/bin/sh", "-c", "\"$0\" \"$@\" > /tmp/out 2>&1", *sys.argv[1:]]))' "$@")
  printf 'FROM %s AS run\nRUN %s\nFROM scratch\nCOPY --from=run /tmp/out /out\n' "${NAME[$image]}" "$run" > "$tmp/Dockerfile"
  "$node_dir/buildctl" --addr "unix://$bk_state/buildkitd.sock" build --progress plain \
      --frontend dockerfile.v0 --local context="$tmp" --local dockerfile="$tmp" \
      --oci-layout "img=$dir/layout" --opt "context:${NAME[$image]}=oci-layout://img:${NAME[$image]##*:}@$digest" \
      --output "type=local,dest=$tmp/out" > "$tmp/log" 2>&1 \
    || { tail -n 20 "$tmp/log" >&2; die "$image: \`$*\` failed in the image"; }
  cat "$tmp/out/out"
  rm -rf "$tmp"
}

build_dockerfile() {
  local image=$1 out
  ensure_tools
  case $image in
    trainguard) buildctl_build trainguard "$repo" Dockerfile ;;
    trainer) buildctl_build trainer "$repo/tests/node/images" trainer.Dockerfile ;;
  esac
  case $image in
    trainguard) out=$(smoke trainguard trainguard --version) ;;
    trainer) out=$(smoke trainer python -c "import trainguard.cache.client, sys; print(sys.version.split()[0], trainguard.cache.client.__name__)") ;;
  esac
  log "$image: runs: $out"
  finish "$image" "$(<"$(image_dir "$image")/.digest")"
}

ensure_tools() {
  local need=()
  [[ -x $node_dir/buildkitd && -x $node_dir/buildctl && -x $node_dir/runc && -x $node_dir/ctr ]] || need=(node)
  if [[ ${#need[@]} -gt 0 ]]; then
    log "node binaries missing in $node_dir: hack/build-tools.sh node ..."
    "$here/build-tools.sh" node >/dev/null
  fi
}

build() {
  local images=("$@") image
  [[ ${#images[@]} -gt 0 ]] || images=("${IMAGES[@]}")
  [[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, buildkitd with runc)"
  "$here/deps.sh" images
  mkdir -p "$cache"
  for image in "${images[@]}"; do
    [[ -n ${NAME[$image]:-} ]] || die "unknown image '$image' (known: ${IMAGES[*]})"
    # a Dockerfile image is built on the base: build that first
    if [[ $image == trainguard || $image == trainer ]] && ! built base; then build_base; fi
    if built "$image"; then log "$image: cached ($(image_dir "$image"))"; continue; fi
    case $image in
      base) build_base ;;
      pause) build_pause ;;
      *) build_dockerfile "$image" ;;
    esac
  done
  stop_buildkitd
}

load() {
  local images=("$@") image tmp
  [[ ${#images[@]} -gt 0 ]] || images=("${IMAGES[@]}")
  [[ -S $sock ]] || die "no containerd socket at $sock: start the node (hack/node.sh up) or set TRAINGUARD_NODE_CONTAINERD_SOCK"
  build "${images[@]}"
  new_tmp tmp
  for image in "${images[@]}"; do
    local dir start=$SECONDS
    dir=$(image_dir "$image")
    "$py" "$here/oci_layout.py" archive "$dir/layout" "$tmp/$image.tar"
    # ctr warns on every call that cgroup v1 is deprecated: its output is shown only when the import fails
    "$node_dir/ctr" --address "$sock" -n k8s.io images import "$tmp/$image.tar" > "$tmp/ctr.log" 2>&1 \
      || { cat "$tmp/ctr.log" >&2; die "$image: ctr images import failed"; }
    rm -f "$tmp/$image.tar"
    local got
    got=$(loaded_digest "$image")
    [[ $got == "$(<"$dir/digest")" ]] || die "$image: containerd has ${got:-nothing} as ${NAME[$image]}, expected $(<"$dir/digest")"
    log "$image: loaded ${NAME[$image]}@$got in $((SECONDS - start)) s"
  done
}

# loaded_digest IMAGE: the digest containerd's k8s.io namespace has under IMAGE's name (empty if none or no socket).
loaded_digest() {
  [[ -S $sock ]] || return 0
  "$node_dir/ctr" --address "$sock" -n k8s.io images ls -q "name==${NAME[$1]}" >/dev/null 2>&1 || return 0
  "$node_dir/ctr" --address "$sock" -n k8s.io images ls "name==${NAME[$1]}" 2>/dev/null \
    | awk -v n="${NAME[$1]}" '$1==n {print $3}'
}

status() {
  local image dir digest
  printf '%-11s %-38s %-73s %-8s %s\n' IMAGE NAME DIGEST SIZE LOADED
  for image in "${IMAGES[@]}"; do
    dir=$(image_dir "$image")
    if built "$image"; then digest=$(<"$dir/digest"); else digest="(not built)"; fi
    local size="-" loaded="-"
    [[ -d $dir/layout ]] && size=$(du -sh "$dir/layout" | cut -f1)
    if [[ -S $sock && -x $node_dir/ctr ]]; then
      loaded=$(loaded_digest "$image")
      if [[ -z $loaded ]]; then loaded=no; elif [[ $loaded == "$digest" ]]; then loaded=yes; else loaded="stale ($loaded)"; fi
    fi
    printf '%-11s %-38s %-73s %-8s %s\n' "$image" "${NAME[$image]}" "$digest" "$size" "$loaded"
  done
  echo "cache: $cache ($(du -sh "$cache" 2>/dev/null | cut -f1 || echo empty))"
  echo "containerd: $sock$([[ -S $sock ]] || echo ' (not running)')"
}

# lock: one build or load at a time per cache directory. A second run waits: it would otherwise remove the first
# one's directory as a stale build (its key differs when the tree changed in between) and share buildkit-cache/.
lock() {
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock -n 9 || { log "another hack/images.sh is building in $cache: waiting for it ..."; flock 9; }
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
# every key once, in this shell: the functions that run in command substitutions read them from KEY
if [[ $cmd == build || $cmd == load || $cmd == status ]]; then
  for _image in "${IMAGES[@]}"; do KEY[$_image]=$(key "$_image"); done
fi
case $cmd in
  build) lock; build "$@" ;;
  load) lock; load "$@" ;;
  status) status ;;
  dir) [[ $# -eq 1 && -n ${NAME[$1]:-} ]] || die "usage: hack/images.sh dir IMAGE"; built "$1" && echo "$(image_dir "$1")/layout" ;;
  *) echo "usage: hack/images.sh build|load|status|dir [IMAGE...]   (IMAGE: ${IMAGES[*]})" >&2; exit 2 ;;
esac
