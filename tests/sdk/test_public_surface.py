"""The pinned public surface of ``import vslice``."""

from __future__ import annotations

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


def test_public_names_need_no_leading_underscore_modules() -> None:
    public = {n for n in dir(vslice) if not n.startswith("_")}
    modules = {
        "client",
        "errors",
        "manifests",
        "plans",
        "slices",
        "snapshot",
        "tables",
        "views",
        "widgets",
        "workload",
        "jupyterhub",
    }
    assert public - modules - {"annotations", "importlib", "TYPE_CHECKING", "Any"} <= set(
        vslice.__all__
    )


def test_the_error_hierarchy_is_the_one_users_catch() -> None:
    for name in ("InvalidRequest", "NoFit", "ClusterError", "Timeout"):
        assert issubclass(getattr(vslice, name), vslice.VsliceError)
        assert getattr(vslice, name) is getattr(errors, name)
    assert issubclass(vslice.InvalidRequest, ValueError)
    assert issubclass(vslice.Timeout, TimeoutError)


def test_importing_vslice_loads_neither_kubernetes_nor_ipywidgets() -> None:
    code = "import sys, vslice; print('kubernetes' in sys.modules, 'ipywidgets' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["False", "False"], result.stderr
