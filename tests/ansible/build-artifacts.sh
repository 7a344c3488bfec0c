#!/usr/bin/env bash
# Builds what the molecule scenario installs the air-gapped way, into OUTDIR:
#   dist/vslice-*.whl   the vslice wheel of this checkout (rebuilt every time)
#   wheelhouse/         its dependencies as wheels (cached under ~/.cache/vslice/wheelhouse/,
#                       keyed by the dependency list, so warm runs never touch the network)
#   libvslice.so        the shim (make -C shim), and hook/vslice-memory-limit beside it
#   debs/driver, debs/toolkit   stand-in NVIDIA packages (fake-nvidia-debs.sh)
# Usage: build-artifacts.sh OUTDIR   (run from anywhere; uses the checkout's .venv)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$1"
py="$root/.venv/bin/python"
cache="${VSLICE_CACHE:-$HOME/.cache/vslice}"
mkdir -p "$out"

rm -rf "$out/dist"
"$py" -m pip wheel -q --no-deps --no-build-isolation -w "$out/dist" "$root"

key="$("$py" - "$root/pyproject.toml" <<'PY'
import hashlib, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print(hashlib.sha256("\n".join(sorted(deps)).encode()).hexdigest()[:16])
PY
)"
wheelhouse="$cache/wheelhouse/$key"
if [ ! -f "$wheelhouse/.complete" ]; then
  mkdir -p "$wheelhouse"
  "$py" -m pip wheel -q --no-build-isolation -w "$wheelhouse" "$root"
  rm -f "$wheelhouse"/vslice-*.whl
  touch "$wheelhouse/.complete"
fi
rm -rf "$out/wheelhouse"
mkdir -p "$out/wheelhouse"
cp "$wheelhouse"/*.whl "$out/wheelhouse/"

make -s -C "$root/shim" -j2 >&2
cp "$root/shim/build/libvslice.so" "$out/libvslice.so"
# Beside the shim, where the node role looks for it (vslice_node_memory_limit_hook_file).
mkdir -p "$out/hook"
cp "$root/shim/build/hook/vslice-memory-limit" "$out/hook/vslice-memory-limit"

bash "$here/fake-nvidia-debs.sh" "$out/debs" 2>/dev/null
echo "$out"
