# System packages and the Python virtualenv. Sourced by .ci/setup (both profiles).
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
base_packages=(build-essential git python3-venv curl ca-certificates openssl)
missing=()
for p in "${base_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# The lab needs vslice alone (and nvidia-ml-py, which the monitor loads as on a real node); the
# full profile adds the test, lint and notebook tools. A stamp of pyproject.toml and the extras
# skips pip when nothing changed (a full install covers the lab's extra: `dev` has nvidia-ml-py).
if [ "${VSLICE_SETUP:-full}" = lab ]; then base_extras="nvml"; else base_extras="dev,notebook"; fi
base_stamp=".venv/.vslice-setup"
base_hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
base_done="$(cat "$base_stamp" 2>/dev/null || true)"
if [ "$base_done" = "$base_hash $base_extras" ] ||
  { [ "$base_extras" = nvml ] && [ "$base_done" = "$base_hash dev,notebook" ]; }; then
  echo "vslice is installed in .venv with [$base_extras] (pyproject.toml unchanged)"
else
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[$base_extras]"
  echo "$base_hash $base_extras" >"$base_stamp"
fi
unset base_packages base_extras base_stamp base_hash base_done
