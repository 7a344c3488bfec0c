#!/usr/bin/env bash
# GPU checks for the shim, for a machine with an NVIDIA GPU and driver (not the fake one):
#   - a driver-API program and PyTorch: allocation beyond the slice fails / raises OOM,
#     also with PyTorch's expandable segments (cuMemCreate through cuGetProcAddress);
#   - cuMemGetInfo, torch.cuda.mem_get_info and nvidia-smi show the slice;
#   - SM pacing with real kernels, measured by NVML's utilisation sampler;
#   - NVIDIA's cuda-bindings stopped at the slice on every allocation path, gpustat and nvitop
#     showing the slice and the holding process (tests/gpu/test_gpu_nvidia_tools.py);
#   - the driver-enforced memory backend where the driver has it (R615+, cgroup v2): the
#     hook's probe, and a process without the shim held at 1 GiB by the driver alone
#     (tests/gpu/test_gpu_driver_limits.py; skipped with the probe's reason elsewhere);
#   - the shim's added cost on the real driver (benchmarks/shim.py --driver real).
# Budget: 5 minutes on one GPU (each check has a timeout, the whole run says its time). It
# needs nothing from the network: the shim is built from the checkout, and the Python packages
# come with the interpreter (the checkout's .venv from `pip install -e '.[dev]'`, carried to
# the GPU machine; pip is told not to reach an index). Ends with one line per check.
# Usage: tests/gpu/run.sh   (from anywhere; PYTHON=... to pick the interpreter with torch)
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/run.sh: no NVIDIA GPU or driver here (nvidia-smi -L failed)" >&2
  exit 2
fi
export PIP_NO_INDEX=1
started=$SECONDS
make -C shim -j"$(nproc)" tests >/dev/null
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
nvidia-smi -L
results="$(mktemp -d)"
trap 'rm -rf "$results"' EXIT
status=0
timeout 240 "$python" -m pytest tests/gpu -m gpu -v -rs -p no:cacheprovider --timeout 120 \
  --junitxml "$results/gpu.xml" || status=$?
bench=PASS
timeout 90 "$python" benchmarks/shim.py --driver real --rounds 3 || { status=1; bench=FAIL; }
echo "== summary"
"$python" tests/gpu/summary.py "$results/gpu.xml" || status=1
echo "gpu-check benchmarks/shim.py --driver real: $bench"
elapsed=$((SECONDS - started))
if [ "$elapsed" -gt 300 ]; then
  echo "gpu-check budget: FAIL took ${elapsed} s, over the 300 s budget"
  status=1
else
  echo "gpu-check budget: PASS ${elapsed} s of 300 s"
fi
exit "$status"
