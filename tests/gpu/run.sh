#!/usr/bin/env bash
# GPU checks for the shim, for a machine with an NVIDIA GPU and driver (not the fake one):
#   - a driver-API program and PyTorch: allocation beyond the slice fails / raises OOM,
#     also with PyTorch's expandable segments (cuMemCreate through cuGetProcAddress);
#   - cuMemGetInfo, torch.cuda.mem_get_info and nvidia-smi show the slice;
#   - SM pacing with real kernels, measured by NVML's utilisation sampler;
#   - NVIDIA's cuda-bindings stopped at the slice on every allocation path, gpustat and nvitop
#     showing the slice and the holding process (tests/gpu/test_gpu_nvidia_tools.py);
#   - the shim's added cost on the real driver (benchmarks/shim.py --driver real).
# Usage: tests/gpu/run.sh   (from anywhere; PYTHON=... to pick the interpreter with torch)
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/run.sh: no NVIDIA GPU or driver here (nvidia-smi -L failed)" >&2
  exit 2
fi
make -C shim -j"$(nproc)" tests >/dev/null
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
nvidia-smi -L
status=0
"$python" -m pytest tests/gpu -m gpu -v -rs -p no:cacheprovider || status=$?
"$python" benchmarks/shim.py --driver real --rounds 3 || status=$?
exit "$status"
