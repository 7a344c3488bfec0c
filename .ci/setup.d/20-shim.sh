# The shim: libvslice.so and the fake driver, built with gcc alone; then (full profile only)
# NVIDIA's cuda.h and nvml.h from their wheels, for the test that compares the shim's
# declarations with them. Sourced by .ci/setup; idempotent.
make -C shim -j2
cuda_headers="$HOME/.cache/vslice/cuda-headers"
if [ "${VSLICE_SETUP:-full}" = full ] &&
  { [ ! -f "$cuda_headers/include/cuda.h" ] || [ ! -f "$cuda_headers/include/nvml.h" ]; }; then
  mkdir -p "$cuda_headers/include"
  if .venv/bin/python -m pip download -q --no-deps -d "$cuda_headers" \
      nvidia-cuda-runtime-cu12==12.9.79 nvidia-nvml-dev-cu12==12.9.79; then
    .venv/bin/python - "$cuda_headers" <<'PY'
import pathlib, sys, zipfile
root = pathlib.Path(sys.argv[1])
wanted = {"nvidia/cuda_runtime/include/cuda.h", "nvidia/nvml_dev/include/nvml.h"}
for wheel in root.glob("*.whl"):
    with zipfile.ZipFile(wheel) as archive:
        for name in wanted & set(archive.namelist()):
            (root / "include" / pathlib.Path(name).name).write_bytes(archive.read(name))
PY
  else
    echo "warning: could not fetch NVIDIA's headers; the header drift test will fail"
  fi
fi
