# SDK: headless Chromium renders the notebook HTML once (tests/sdk/test_html_screenshot.py).
# Sourced by .ci/setup; idempotent.
SUDO="${SUDO-}"
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
sdk_packages=(chromium fonts-dejavu-core)
sdk_missing=()
for p in "${sdk_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || sdk_missing+=("$p")
done
if [ ${#sdk_missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${sdk_missing[@]}"
fi
unset sdk_packages sdk_missing
