#!/usr/bin/env bash
# Installs the Debian packages a hack/ target needs, only those missing (apt-get; the machine's configured mirror
# and versions: Debian bookworm's, which its point releases keep ABI-stable). Run as root, or it says what to run.
#
# usage: hack/deps.sh GROUP...
#   node:   what `hack/build-tools.sh node` compiles with: gcc and the C library headers (runc's nsenter, the
#           static pause binary), libseccomp-dev + pkg-config (runc's seccomp build tag)
#   node-host: what `hack/node.sh` runs on the host: iptables (kube-proxy writes its rules with it; node.sh reads
#           and restores them with iptables-save/-restore), nft (removes the empty tables iptables-nft leaves),
#           nfacct (deletes the accounting objects kube-proxy creates), ip and ss (iproute2), mount and umount
#   images: what `hack/images.sh build` runs: debootstrap (the base root filesystem) and the keyring it checks the
#           mirror's Release files with
set -euo pipefail

declare -A GROUP=(
  [node]="gcc libc6-dev libseccomp-dev pkg-config"
  [images]="debootstrap debian-archive-keyring"
  [node-host]="iptables nftables nfacct iproute2 mount"
)

[[ $# -gt 0 ]] || { echo "usage: hack/deps.sh ${!GROUP[*]}" >&2; exit 2; }
want=()
for g in "$@"; do
  [[ -n ${GROUP[$g]:-} ]] || { echo "deps: unknown group '$g' (known: ${!GROUP[*]})" >&2; exit 2; }
  read -ra pkgs <<<"${GROUP[$g]}"
  for p in "${pkgs[@]}"; do
    # dpkg-query says 'install ok installed' only for a fully installed package
    [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] || want+=("$p")
  done
done
[[ ${#want[@]} -gt 0 ]] || exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "deps: missing Debian packages: ${want[*]} (run: sudo apt-get install -y ${want[*]})" >&2
  exit 1
fi
echo "deps: installing ${want[*]} ..." >&2
export DEBIAN_FRONTEND=noninteractive
# a fresh machine may have no package lists yet; an old list may name versions the mirror no longer serves
apt-get update -qq -o DPkg::Lock::Timeout=300 >&2
apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${want[@]}" >&2
