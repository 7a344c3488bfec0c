"""The pinned public surface of ``import vslice``."""

from __future__ import annotations

import inspect
import subprocess
import sys

import vslice
from vslice import errors

EXPECTED = [
    "AllocationRow",
    "AllocationTable",
    "Client",
    "ClusterError",
    "ClusterView",
    "DecodeError",
    "GpuRow",
    "GpuTable",
    "InvalidRequest",
    "NoFit",
    "Placement",
    "Plan",
    "Slice",
    "SlicePicker",
    "Stalled",
    "Timeout",
    "VsliceError",
    "Workload",
]


def test_all_is_sorted_and_pinned() -> None:
    assert vslice.__all__ == sorted(vslice.__all__)
    assert vslice.__all__ == EXPECTED


def test_every_public_name_resolves() -> None:
    for name in vslice.__all__:
        assert getattr(vslice, name).__name__ == name


def test_nothing_public_is_left_out_of_all() -> None:
    exported = {
        name
        for name, value in vars(vslice).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert exported - {"annotations", "TYPE_CHECKING", "Any"} <= set(vslice.__all__)


def test_the_error_hierarchy_is_the_one_users_catch() -> None:
    for name in ("InvalidRequest", "NoFit", "ClusterError", "Stalled", "Timeout"):
        assert issubclass(getattr(vslice, name), vslice.VsliceError)
        assert getattr(vslice, name) is getattr(errors, name)
    assert issubclass(vslice.InvalidRequest, ValueError)
    assert issubclass(vslice.Timeout, TimeoutError)
    assert issubclass(vslice.Stalled, vslice.ClusterError)


def test_importing_vslice_loads_neither_kubernetes_nor_ipywidgets() -> None:
    code = "import sys, vslice; print('kubernetes' in sys.modules, 'ipywidgets' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["False", "False"], result.stderr
