# The local lab's binaries: etcd, the Kubernetes components and kwok, built once from Go modules
# into ~/.cache/vslice/k8s/<version>/ (a second run finds them and builds nothing), and the real
# node's kubelet and containerd; for the oldest supported Kubernetes version as well, without
# the node binaries (its end-to-end smoke test runs simulated nodes only). Sourced by .ci/setup
# after the virtualenv exists. Needs Go >= 1.26 (kwok v0.8 asks for it); an older go is asked
# for that toolchain with GOTOOLCHAIN (it downloads it through its own proxy settings and caches
# it in the module cache).
vslice_go_toolchain="go1.26.8"
vslice_k8s_oldest="$(.venv/bin/python -c \
  'from vslice_build.versions import OLDEST_KUBERNETES_VERSION as v; print(v)')"
for dir in /usr/local/go/bin "$HOME/.cache/vslice/go/bin"; do
  if ! command -v go >/dev/null 2>&1 && [ -x "$dir/go" ]; then
    export PATH="$PATH:$dir"
  fi
done
if ! command -v go >/dev/null 2>&1 || ! go version | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; then
  if ! .venv/bin/python -m vslice_build.binaries --check >/dev/null 2>&1 ||
    ! .venv/bin/python -m vslice_build.binaries --check --no-node --version "$vslice_k8s_oldest" \
      >/dev/null 2>&1; then
    if ! command -v go >/dev/null 2>&1; then
      echo "30-k8s: the lab's binaries must be built once and no Go toolchain is installed;" >&2
      echo "  install Go (1.21 or newer fetches $vslice_go_toolchain itself)" >&2
      return 1 2>/dev/null || exit 1
    fi
    echo "asking go for the toolchain $vslice_go_toolchain (GOTOOLCHAIN)"
    export GOTOOLCHAIN="$vslice_go_toolchain"
    go version
  fi
fi
.venv/bin/python -m vslice_build.binaries
.venv/bin/python -m vslice_build.binaries --no-node --version "$vslice_k8s_oldest"
