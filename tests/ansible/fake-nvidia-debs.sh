#!/usr/bin/env bash
# Builds stand-ins for NVIDIA's driver and container-toolkit packages, for the molecule scenario.
#
# A container cannot load a kernel module and these hosts have no GPU, so the real packages
# cannot do their job here; the stand-ins keep their names, versions, dependencies, files and
# units, and behave like the real tools do on a machine without a loaded driver (nvidia-smi fails
# the same way). The container-toolkit stand-ins wrap runc, like nvidia-container-runtime does,
# and answer `nvidia-ctk cdi generate/list` for the GPUs whose /dev/nvidia<N> nodes exist (one,
# "0", on a host without any), as the real nvidia-ctk lists the GPUs the driver knows.
# libcuda1 and libnvidia-ml1 carry the fake driver and NVML the shim is tested against
# (shim/build/fake, from `make -C shim`), at the paths Debian's packages use, so a host that
# installs these stand-ins can run CUDA programs against the fake GPUs (FAKE_NVIDIA_GPUS).
#
# Usage: fake-nvidia-debs.sh OUTDIR  ->  OUTDIR/driver/*.deb (two versions, to exercise the
# pin) and OUTDIR/toolkit/*.deb.
set -euo pipefail
out="$1"
here="$(cd "$(dirname "$0")" && pwd)"
fake="$here/../../shim/build/fake"
for lib in libcuda.so.1 libnvidia-ml.so.1; do
  [ -f "$fake/$lib" ] || { echo "$fake/$lib is missing: build it with make -C shim" >&2; exit 1; }
done
libdir=/usr/lib/x86_64-linux-gnu
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# package NAME VERSION DEPENDS DEST; file contents come from stdin as "PATH<TAB>MODE<TAB>TEXT" lines
# where TEXT uses \n escapes, or is @FILE to copy FILE.
package() {
  local name="$1" version="$2" depends="$3" dest="$4" root="$work/$1_$2"
  mkdir -p "$root/DEBIAN"
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: all"
    echo "Maintainer: vslice tests <tests@vslice.invalid>"
    [ -n "$depends" ] && echo "Depends: $depends"
    echo "Section: non-free/misc"
    echo "Priority: optional"
    echo "Description: stand-in for NVIDIA's $name (vslice molecule tests)"
    echo " Test double used where no GPU or driver exists; never install it on a real host."
  } >"$root/DEBIAN/control"
  while IFS=$'\t' read -r path mode text; do
    mkdir -p "$root$(dirname "$path")"
    if [ "${text#@}" != "$text" ]; then
      cp "${text#@}" "$root$path"
    else
      printf '%b' "$text" >"$root$path"
    fi
    chmod "$mode" "$root$path"
  done
  mkdir -p "$dest"
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$dest/${name}_${version}_all.deb" >/dev/null
}

driver() {
  local v="$1" upstream="${1%-*}"
  package nvidia-kernel-dkms "$v" "" "$out/driver" <<EOF2
/usr/src/nvidia-current-$upstream/dkms.conf	0644	PACKAGE_NAME="nvidia-current"\nPACKAGE_VERSION="$upstream"\nBUILT_MODULE_NAME[0]="nvidia"\nAUTOINSTALL=yes\n
EOF2
  package libcuda1 "$v" "" "$out/driver" <<EOF2
$libdir/libcuda.so.1	0644	@$fake/libcuda.so.1
/usr/share/doc/libcuda1/STAND-IN	0644	Stand-in for libcuda.so.1 $upstream: vslice's fake driver.\n
EOF2
  package libnvidia-ml1 "$v" "" "$out/driver" <<EOF2
$libdir/libnvidia-ml.so.1	0644	@$fake/libnvidia-ml.so.1
EOF2
  package nvidia-smi "$v" "libcuda1 (= $v), libnvidia-ml1 (= $v)" "$out/driver" <<EOF2
/usr/bin/nvidia-smi	0755	#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running." >&2\nexit 9\n
EOF2
  package nvidia-persistenced "$v" "" "$out/driver" <<EOF2
/usr/bin/nvidia-persistenced	0755	#!/bin/sh\necho "nvidia-persistenced failed to initialize. Check syslog for more details." >&2\nexit 1\n
/lib/systemd/system/nvidia-persistenced.service	0644	[Unit]\nDescription=NVIDIA Persistence Daemon\n\n[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --user nvpd\n\n[Install]\nWantedBy=multi-user.target\n
EOF2
}

rm -rf "$out"
driver 535.216.01-1
driver 535.247.01-1

tv=1.17.8-1
package nvidia-container-toolkit-base "$tv" "" "$out/toolkit" <<EOF2
/usr/bin/nvidia-container-runtime	0755	#!/bin/sh\n# Stand-in: the real runtime adds the GPU to the OCI spec, then runs runc.\nexec runc "\$@"\n
/usr/bin/nvidia-ctk	0755	@$here/fake-nvidia-ctk.sh
EOF2
package nvidia-container-toolkit "$tv" "nvidia-container-toolkit-base (= $tv)" "$out/toolkit" <<'EOF2'
/usr/bin/nvidia-container-runtime-hook	0755	#!/bin/sh\nexit 0\n
EOF2
ls "$out"/driver "$out"/toolkit >&2
