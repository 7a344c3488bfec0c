# The local lab's binaries: etcd, the Kubernetes components and kwok, built once from Go modules
# into ~/.cache/vslice/k8s/<version>/ (a second run finds them and builds nothing), the real
# node's kubelet and containerd, and kubeadm and kubectl (the bundle's; kubectl is linked as
# .venv/bin/kubectl, the lab's version); in the full profile the older supported Kubernetes
# versions as well (the previous minor and the oldest), without the node binaries (their
# end-to-end smoke test runs simulated nodes only). Each build says what it builds, about how long it takes and where its log is. Sourced
# by .ci/setup after the virtualenv exists. Needs Go >= 1.26 (kwok v0.8 asks for it); an older go is asked
# for that toolchain with GOTOOLCHAIN (it downloads it through its own proxy settings and caches
# it in the module cache).
vslice_go_toolchain="go1.26.8"
vslice_k8s_older="$(.venv/bin/python -c \
  'from vslice_build.versions import SMOKE_KUBERNETES_VERSIONS as v; print(*v)')"
for dir in /usr/local/go/bin "$HOME/.cache/vslice/go/bin"; do
  if ! command -v go >/dev/null 2>&1 && [ -x "$dir/go" ]; then
    export PATH="$PATH:$dir"
  fi
done
k8s_built() {
  .venv/bin/python -m vslice_build.binaries --check >/dev/null 2>&1 || return 1
  [ "${VSLICE_SETUP:-full}" = lab ] && return 0
  .venv/bin/python -m vslice_build.kueue --check >/dev/null 2>&1 || return 1
  local version
  for version in $vslice_k8s_older; do
    .venv/bin/python -m vslice_build.binaries --check --no-node --version "$version" \
      >/dev/null 2>&1 || return 1
  done
}
if ! command -v go >/dev/null 2>&1 || ! go version | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; then
  if ! k8s_built; then
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
if [ "${VSLICE_SETUP:-full}" = full ]; then
  for vslice_k8s_version in $vslice_k8s_older; do
    .venv/bin/python -m vslice_build.binaries --no-node --version "$vslice_k8s_version"
  done
  unset vslice_k8s_version
  # Kueue for the session lab's team queues (tests/e2e/test_kueue_lab.py); `vslice lab up
  # --kueue` builds it on demand in the lab profile.
  .venv/bin/python -m vslice_build.kueue
fi
# kubectl of the lab's version beside vslice, so the docs' `.venv/bin/kubectl` works on a machine
# without one; a kubectl someone put there is left alone.
k8s_kubectl="$(.venv/bin/python -c \
  'from vslice_build.binaries import ensure_tools; print(ensure_tools()["kubectl"])')"
if [ ! -e .venv/bin/kubectl ] || [ -L .venv/bin/kubectl ]; then
  ln -sfn "$k8s_kubectl" .venv/bin/kubectl
fi
echo "kubectl: .venv/bin/kubectl -> $(readlink .venv/bin/kubectl || echo "$k8s_kubectl")"
unset -f k8s_built
unset vslice_k8s_older k8s_kubectl
