"""Records every NVML entry point pynvml resolves and whether the library had it. On
PYTHONPATH, Python imports this at start-up in every program (gpustat, nvitop, scripts); at
exit it appends one ``name 1|0`` line per name to the file VSLICE_TEST_NVML_TRACE names.
pynvml resolves each name through this one function, on first use."""

from __future__ import annotations

import atexit
import os
from typing import Any

import pynvml

_resolve = pynvml._nvmlGetFunctionPointer
_seen: dict[str, bool] = {}


def _traced(name: str) -> Any:
    try:
        found = _resolve(name)
    except pynvml.NVMLError:
        _seen[name] = False
        raise
    _seen[name] = True
    return found


@atexit.register
def _write() -> None:
    with open(os.environ["VSLICE_TEST_NVML_TRACE"], "a") as out:
        for name, found in sorted(_seen.items()):
            out.write(f"{name} {int(found)}\n")


pynvml._nvmlGetFunctionPointer = _traced
