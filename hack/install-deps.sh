#!/usr/bin/env bash
# Installs the host prerequisites pvrescue's tests need, only what is missing: Debian/Ubuntu
# packages (apt-get) and kernel modules (modprobe). Nothing else on the host is assumed: the
# Kubernetes binaries and versitygw are built by the Makefile, and no sysctl needs changing.
# Usage: hack/install-deps.sh [group ...]; groups: node, e2e, monitoring, images (default: all).
# images: apt's index for every architecture the images are built for (dpkg --add-architecture
# arm64: make images fetches the agent's Debian packages per architecture by name) and Debian's
# qemu-user-static (make image-check runs the arm64 binaries).
set -euo pipefail

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(node e2e monitoring images)

# command -> Debian package
declare -A node_pkgs=(
  [etcd]=etcd-server
  [losetup]=util-linux
  [blockdev]=util-linux
  [unshare]=util-linux
  [nsenter]=util-linux
  [file]=file
  [s3fs]=s3fs
  [rclone]=rclone
  [fusermount3]=fuse3
  [modprobe]=kmod
  [ps]=procps
)
declare -A e2e_pkgs=(
  [containerd]=containerd
  [runc]=runc
  [busybox]=busybox-static
  [iptables]=iptables
  [ip]=iproute2
)
declare -A monitoring_pkgs=(
  [promtool]=prometheus
)
declare -A images_pkgs=(
  [qemu-aarch64-static]=qemu-user-static
  [dpkg-deb]=dpkg
  [apt-get]=apt
)
# Debian architectures the images' packages are fetched for, besides the host's own.
image_archs=(amd64 arm64)
# kernel module -> how to tell it is there
declare -A node_mods=(
  [loop]="test -e /dev/loop-control"
  [fuse]="test -e /dev/fuse"
)
declare -A e2e_mods=(
  [overlay]="grep -qw overlay /proc/filesystems"
)

want=()
check() { # cmd pkg
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -x "/usr/lib/cni/$1" ]; then want+=("$2"); fi
}
archs=()
update=
mods=()
checkmod() { # module test
  if ! bash -c "$2"; then mods+=("$1"); fi
}
for g in "${groups[@]}"; do
  case "$g" in
    node)
      for c in "${!node_pkgs[@]}"; do check "$c" "${node_pkgs[$c]}"; done
      for m in "${!node_mods[@]}"; do checkmod "$m" "${node_mods[$m]}"; done
      ;;
    e2e)
      for c in "${!e2e_pkgs[@]}"; do check "$c" "${e2e_pkgs[$c]}"; done
      for m in "${!e2e_mods[@]}"; do checkmod "$m" "${e2e_mods[$m]}"; done
      [ -x /usr/lib/cni/bridge ] || want+=(containernetworking-plugins)
      ;;
    monitoring) for c in "${!monitoring_pkgs[@]}"; do check "$c" "${monitoring_pkgs[$c]}"; done ;;
    images)
      for c in "${!images_pkgs[@]}"; do check "$c" "${images_pkgs[$c]}"; done
      if command -v dpkg >/dev/null; then
        native=$(dpkg --print-architecture)
        for a in "${image_archs[@]}"; do
          [ "$a" = "$native" ] && continue
          dpkg --print-foreign-architectures | grep -qx "$a" || archs+=("$a")
          # an added architecture whose index was never fetched: apt-get update
          compgen -G "/var/lib/apt/lists/*_binary-${a}_Packages*" >/dev/null || update=1
        done
      fi
      ;;
    *) echo "unknown group $g" >&2; exit 2 ;;
  esac
done
if [ ${#want[@]} -eq 0 ] && [ ${#mods[@]} -eq 0 ] && [ ${#archs[@]} -eq 0 ] && [ -z "$update" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  [ ${#archs[@]} -eq 0 ] && [ -z "$update" ] || echo "apt lacks the index of ${archs[*]:-a foreign architecture} — run as root or: sudo dpkg --add-architecture ARCH && sudo apt-get update" >&2
  [ ${#want[@]} -eq 0 ] || echo "missing packages: ${want[*]} — run as root or: sudo apt-get install -y ${want[*]}" >&2
  [ ${#mods[@]} -eq 0 ] || echo "missing kernel modules: ${mods[*]} — run as root or: sudo modprobe -a ${mods[*]}" >&2
  exit 1
fi
for a in "${archs[@]}"; do
  echo ">> dpkg --add-architecture $a" >&2
  dpkg --add-architecture "$a"
  update=1
done
if [ -n "$update" ] && [ ${#want[@]} -eq 0 ]; then
  echo ">> apt-get update (the images' architectures)" >&2
  apt-get update -qq
fi
if [ ${#want[@]} -gt 0 ]; then
  mapfile -t want < <(printf '%s\n' "${want[@]}" | sort -u)
  echo ">> apt-get install ${want[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi
for m in "${mods[@]}"; do
  echo ">> modprobe $m" >&2
  modprobe "$m" || { echo "modprobe $m failed: this kernel has no $m module; the tests need it" >&2; exit 1; }
done
# a loaded module's device node appears in devtmpfs; without udev, make the ones the tests open
[ -e /dev/loop-control ] || mknod -m 0660 /dev/loop-control c 10 237
[ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229
