"""vslice: fractional GPU sharing on Kubernetes, from Python and notebooks.

    import vslice

    client = vslice.Client()                      # kubeconfig, then in-cluster
    print(client.plan(vslice.Slice("10Gi", cores=30)))
    job = client.run("python:3.12", "python train.py", slice=vslice.Slice("10Gi", cores=30))
    job.wait(timeout=120).allocation              # node, GPU UUIDs and models, memory, cores

Errors (``vslice.errors``): ``InvalidRequest`` (bad input, names field and value),
``NoFit`` (``.reasons`` per node), ``ClusterError`` (``.status`` from the API), ``Stalled``
(a wait that cannot progress, with ``.reason``; a ``ClusterError``), ``Timeout``;
all derive from ``VsliceError``. The widgets (``ClusterView``, ``SlicePicker``) need the
notebook extra (``pip install 'vslice[notebook]'``) and are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The views register how tables and plans render (``_repr_html_``, ``str``), so they load with
# the package, before any table or plan can be shown.
from vslice import views  # noqa: F401
from vslice.errors import (
    ClusterError,
    DecodeError,
    InvalidRequest,
    NoFit,
    Stalled,
    Timeout,
    VsliceError,
)
from vslice.plans import Plan
from vslice.slices import Slice
from vslice.tables import AllocationRow, AllocationTable, GpuRow, GpuTable, Placement
from vslice.workload import Workload

__version__ = "0.1.0"

__all__ = [
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

# Loaded on first use: the Client pulls in the Kubernetes client (slow to import, and
# ``vslice plan`` must start without it); the widgets need ipywidgets (an optional extra).
_LAZY = {
    "Client": "vslice.client",
    "ClusterView": "vslice.widgets",
    "SlicePicker": "vslice.widgets",
}

if TYPE_CHECKING:
    from vslice.client import Client
    from vslice.widgets import ClusterView, SlicePicker


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vslice' has no attribute {name!r}")
