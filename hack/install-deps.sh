#!/usr/bin/env bash
# Installs the host packages pvrescue's tests need, only when a command is missing.
# Debian/Ubuntu (apt-get). Usage: hack/install-deps.sh [group ...]; groups: node, e2e (default: all).
set -euo pipefail

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(node e2e)

# command -> Debian package
declare -A pkgs=(
  [etcd]=etcd-server
  [losetup]=util-linux
  [blockdev]=util-linux
  [file]=file
  [s3fs]=s3fs
  [fusermount]=fuse3
  [unshare]=util-linux
)
declare -A e2e_pkgs=(
  [containerd]=containerd
  [runc]=runc
  [busybox]=busybox-static
  [iptables]=iptables
)
want=()
check() { # cmd pkg
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -x "/usr/lib/cni/$1" ]; then want+=("$2"); fi
}
for g in "${groups[@]}"; do
  case "$g" in
    node) for c in "${!pkgs[@]}"; do check "$c" "${pkgs[$c]}"; done ;;
    e2e)
      for c in "${!e2e_pkgs[@]}"; do check "$c" "${e2e_pkgs[$c]}"; done
      [ -x /usr/lib/cni/bridge ] || want+=(containernetworking-plugins)
      ;;
    *) echo "unknown group $g" >&2; exit 2 ;;
  esac
done
if [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t want < <(printf '%s\n' "${want[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
  echo "missing packages: ${want[*]} — run as root or: sudo apt-get install -y ${want[*]}" >&2
  exit 1
fi
echo ">> apt-get install ${want[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
