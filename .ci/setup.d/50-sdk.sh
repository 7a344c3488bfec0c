# SDK: headless Chromium renders the notebook HTML once (tests/sdk/test_html_screenshot.py),
# and drives JupyterLab through chromium-driver and selenium (tests/e2e/test_notebooks_browser.py).
# Sourced by .ci/setup; idempotent.
SUDO="${SUDO-}"
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
sdk_packages=(chromium chromium-driver fonts-dejavu-core)
sdk_missing=()
for p in "${sdk_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || sdk_missing+=("$p")
done
if [ ${#sdk_missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${sdk_missing[@]}"
fi
# JupyterLab (extra `notebook`) and selenium (extra `browser-test`) for the browser test.
.venv/bin/python -c 'import jupyterlab, selenium' 2>/dev/null ||
  .venv/bin/python -m pip install -q -e '.[dev,notebook,browser-test]'
unset sdk_packages sdk_missing
