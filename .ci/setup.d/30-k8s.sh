# The local lab's binaries: etcd, the Kubernetes components and kwok, built once from Go modules
# into ~/.cache/vslice/k8s/<version>/ (a second run finds them and builds nothing).
# Sourced by .ci/setup after the virtualenv exists. Needs Go >= 1.26 (kwok v0.8 asks for it);
# without one, the Go toolchain is fetched once from the Go module proxy (it is published there
# as the module golang.org/toolchain) into ~/.cache/vslice/go.
vslice_go_toolchain="go1.26.8"
for dir in /usr/local/go/bin "$HOME/.cache/vslice/go/bin"; do
  if ! command -v go >/dev/null 2>&1 && [ -x "$dir/go" ]; then
    export PATH="$PATH:$dir"
  fi
done
if ! command -v go >/dev/null 2>&1 || ! go version | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; then
  if ! .venv/bin/python -m vslice_lab.binaries --check >/dev/null 2>&1; then
    echo "fetching the Go toolchain $vslice_go_toolchain from the Go module proxy"
    vslice_go_zip="$(mktemp)"
    curl -fsSL -o "$vslice_go_zip" \
      "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-${vslice_go_toolchain}.linux-amd64.zip"
    rm -rf "$HOME/.cache/vslice/go" "$HOME/.cache/vslice/go-unpack"
    mkdir -p "$HOME/.cache/vslice/go-unpack"
    .venv/bin/python -m zipfile -e "$vslice_go_zip" "$HOME/.cache/vslice/go-unpack"
    mv "$HOME/.cache/vslice/go-unpack/golang.org/toolchain@v0.0.1-${vslice_go_toolchain}.linux-amd64" \
      "$HOME/.cache/vslice/go"
    rm -rf "$vslice_go_zip" "$HOME/.cache/vslice/go-unpack"
    chmod -R u+x "$HOME/.cache/vslice/go/bin" "$HOME/.cache/vslice/go/pkg/tool"
    export PATH="$HOME/.cache/vslice/go/bin:$PATH"
  fi
fi
.venv/bin/python -m vslice_lab.binaries
