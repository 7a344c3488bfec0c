# Prometheus and promtool for the lab and the alert-rule tests: Debian's package, unpacked into
# the cache rather than installed, because installing it also starts a system Prometheus on port
# 9090 (vslice_build.prometheus). Sourced by .ci/setup; idempotent.
prom_dir="${XDG_CACHE_HOME:-$HOME/.cache}/vslice/prometheus"
if [ ! -x "$prom_dir/bin/prometheus" ] || [ ! -x "$prom_dir/bin/promtool" ]; then
  prom_tmp="$(mktemp -d)"
  chmod 0755 "$prom_tmp"  # apt-get download drops privileges to _apt where it can
  if ! (cd "$prom_tmp" && apt-get download -qq prometheus 2>/dev/null); then
    ${SUDO-} apt-get update -qq
    (cd "$prom_tmp" && apt-get download -qq prometheus)
  fi
  dpkg-deb -x "$prom_tmp"/prometheus_*.deb "$prom_tmp/root"
  mkdir -p "$prom_dir/bin"
  install -m 0755 "$prom_tmp/root/usr/bin/prometheus" "$prom_tmp/root/usr/bin/promtool" "$prom_dir/bin/"
  dpkg-deb -f "$prom_tmp"/prometheus_*.deb Version > "$prom_dir/VERSION"
  rm -rf "$prom_tmp"
fi
echo "prometheus $(cat "$prom_dir/VERSION" 2>/dev/null) in $prom_dir/bin"
unset prom_dir prom_tmp
