#!/usr/bin/env bash
# Builds the Debian 12 image with systemd that the molecule scenarios boot, and imports it into
# podman as localhost/vslice-molecule-debian12:<version>.
#
# The root filesystem comes from debootstrap (minbase plus systemd, dbus and python3) and is
# cached as a tarball under ~/.cache/vslice/images/, so a warm run only imports it (or does
# nothing when podman already has the image). Bump IMAGE_VERSION when the package list changes.
#
# Environment: VSLICE_DEBIAN_MIRROR (default: the first Debian URI of this host's own apt sources),
#              VSLICE_CACHE (default ~/.cache/vslice). Prints the image reference on stdout.
set -euo pipefail

IMAGE_VERSION=1
IMAGE="localhost/vslice-molecule-debian12:${IMAGE_VERSION}"
MIRROR="$(bash "$(dirname "$0")/host-mirror.sh")"
if [ -z "$MIRROR" ]; then
  echo "build-image: no Debian mirror in this host's apt sources; set VSLICE_DEBIAN_MIRROR" >&2
  exit 1
fi
CACHE="${VSLICE_CACHE:-$HOME/.cache/vslice}/images"
TARBALL="$CACHE/debian12-systemd-${IMAGE_VERSION}.tar"
PACKAGES="systemd,systemd-sysv,dbus,python3,ca-certificates"

log() { echo "build-image: $*" >&2; }

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi

if [ ! -s "$TARBALL" ]; then
  mkdir -p "$CACHE"
  rootfs="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
  trap 'rm -rf "$rootfs"' EXIT
  log "debootstrap bookworm from $MIRROR (a few minutes, once)"
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$MIRROR" >&2
  # A container has no consoles, no fstab and no hardware: mask the units that would wait for them.
  for unit in getty@tty1.service serial-getty@.service systemd-udevd.service \
              systemd-udev-trigger.service systemd-modules-load.service \
              sys-kernel-config.mount sys-kernel-debug.mount systemd-remount-fs.service; do
    ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
  done
  # The roles manage apt components themselves; start from the plain main component.
  echo "deb $MIRROR bookworm main" >"$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  : >"$rootfs/etc/machine-id"
  tar -C "$rootfs" --numeric-owner -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
fi

log "importing $TARBALL as $IMAGE"
podman import \
  --change 'CMD=["/sbin/init"]' \
  --change 'STOPSIGNAL=SIGRTMIN+3' \
  --change 'ENV=container=podman' \
  "$TARBALL" "$IMAGE" >&2
echo "$IMAGE"
