# The kubelet's own DRA and plugin-registration .proto files, for the test that compares ours
# with them (tests/services/test_dra_proto.py): downloaded once into the Go module cache as the
# module k8s.io/kubelet. Sourced by .ci/setup after 30-k8s.sh has put go on PATH; idempotent
# (a module already in the cache is neither fetched nor checked again).
dra_proto_module="k8s.io/kubelet@v0.36.3"
dra_proto_cache="$(go env GOMODCACHE)"
if [ ! -f "$dra_proto_cache/$dra_proto_module/pkg/apis/dra/v1/api.proto" ]; then
  echo "downloading $dra_proto_module for the DRA protocol test"
  # `go mod download` wants a module to work in; a throwaway one keeps the checkout untouched.
  dra_proto_tmp="$(mktemp -d)"
  (
    cd "$dra_proto_tmp"
    go mod init vslice.invalid/dra-proto >/dev/null 2>&1
    go mod download "$dra_proto_module"
  ) || echo "warning: could not download $dra_proto_module; tests/services/test_dra_proto.py will skip"
  rm -rf "$dra_proto_tmp"
fi
unset dra_proto_module dra_proto_cache dra_proto_tmp
