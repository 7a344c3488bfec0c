# System packages and the Python virtualenv. Sourced by .ci/setup.
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
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev,notebook]'
