"""The example notebooks, executed headless against the lab, with their outputs checked.

Each notebook runs in a fresh kernel with ``KUBECONFIG`` pointing at the lab and
``VSLICE_NAMESPACE`` at the test's own namespace, exactly as a user would run it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from conftest import LabHandle
from notebook_runs import execute, kinds, pods_left, text

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(autouse=True)
def _services(services: LabHandle) -> None:
    """The notebooks need the extender and webhook."""


def test_quickstart_requests_a_slice_and_shows_where_it_landed(
    lab: LabHandle, namespace: str, monkeypatch: pytest.MonkeyPatch, real_node: Any
) -> None:
    notebook = execute("01-quickstart", lab.kubeconfig, namespace, monkeypatch)
    shown = text(notebook)
    assert "GPU inventory" in shown and "Tesla-T4" in shown  # the inventory rendered as HTML
    assert "fits on" in shown
    assert f"{namespace}/vslice-" in shown  # the placement names the pod in our namespace
    assert "memory MiB: 10240 cores %: 30" in shown
    # vslice-smoke on the real node: what the process in the container saw of its slice
    assert "device.0.name=NVIDIA-L4" in shown
    assert "device.0.total_mib=4096" in shown and "oom_error=CUDA_ERROR_OUT_OF_MEMORY" in shown
    assert "1 GPU, 90 GiB: does not fit: asks 90 GiB per GPU" in shown
    # job.status: the first pod was never evicted (the lab's monitor may already call it idle)
    assert "preempted by: None" in shown
    for node in lab.record.nodes:
        assert f"{node}: its largest GPU has" in shown  # each node's number, in words
    assert "memory: memory percentage must be a whole number 1..100%, got '200%'" in shown
    assert "cores: cores must be a whole number 0..100, got 120" in shown
    assert "gpu_type: gpu_type 'nosuchgpu' matches no GPU model" in shown
    assert pods_left(lab.core, namespace) == []


def test_cluster_view_notebook_shows_widgets_and_submits_from_the_picker(
    lab: LabHandle, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = execute("02-cluster-view", lab.kubeconfig, namespace, monkeypatch)
    shown = text(notebook)
    assert kinds(notebook).count("application/vnd.jupyter.widget-view+json") == 2
    assert "fits: True on" in shown and "submit enabled: True" in shown
    assert f"'{namespace}/vslice-" in shown  # the refreshed view lists the picker's pod
    assert shown.count("NVIDIA-H100-80GB-HBM3") >= 8
    assert pods_left(lab.core, namespace) == []


def test_capacity_planning_notebook_plots_what_fits_where(
    lab: LabHandle, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = execute("03-capacity-planning", lab.kubeconfig, namespace, monkeypatch)
    shown = text(notebook)
    assert kinds(notebook).count("image/png") == 2
    assert "1 GPU, 96 GiB, 25% cores: does not fit" in shown
    assert "insufficient_memory" in shown
    assert "...</td>" not in shown  # the why-not column whole, not cut at pandas' 50 characters
    total = [line for line in shown.splitlines() if "total 8Gi slices that still fit:" in line]
    assert total and int(total[0].rsplit(":", 1)[1]) > 0
    assert os.environ.get("VSLICE_NAMESPACE") == namespace
    assert pods_left(lab.core, namespace) == []
