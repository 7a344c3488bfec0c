"""The example notebooks, executed headless against the lab, with their outputs checked.

Each notebook runs in a fresh kernel with ``KUBECONFIG`` pointing at the lab and
``VSLICE_NAMESPACE`` at the test's own namespace, exactly as a user would run it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import LabHandle
from nbclient import NotebookClient

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(autouse=True)
def _services(services: LabHandle) -> None:
    """The notebooks need the extender and webhook."""


def _execute(name: str, lab: LabHandle, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for cell in notebook.cells:
        assert cell.get("outputs", []) == [], f"{name}: commit notebooks without outputs"
    monkeypatch.setenv("KUBECONFIG", str(lab.kubeconfig))
    monkeypatch.setenv("VSLICE_NAMESPACE", namespace)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    ).execute()
    return notebook


def _outputs(notebook: Any) -> list[dict[str, Any]]:
    return [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]


def _text(notebook: Any) -> str:
    parts = []
    for out in _outputs(notebook):
        if out.output_type == "stream":
            parts.append(out.text)
        for kind in ("text/plain", "text/html"):
            parts.append(out.get("data", {}).get(kind, ""))
    return "\n".join(parts)


def _kinds(notebook: Any) -> list[str]:
    return [kind for out in _outputs(notebook) for kind in out.get("data", {})]


def test_quickstart_requests_a_slice_and_shows_where_it_landed(
    lab: LabHandle, namespace: str, monkeypatch: pytest.MonkeyPatch, real_node: Any
) -> None:
    notebook = _execute("01-quickstart", lab, namespace, monkeypatch)
    text = _text(notebook)
    assert "GPU inventory" in text and "Tesla-T4" in text  # the inventory rendered as HTML
    assert "fits on" in text
    assert f"{namespace}/vslice-" in text  # the placement names the pod in our namespace
    assert "memory MiB: 10240 cores %: 30" in text
    # vslice-smoke on the real node: what the process in the container saw of its slice
    assert "device.0.name=NVIDIA-L4" in text
    assert "device.0.total_mib=4096" in text and "oom_error=CUDA_ERROR_OUT_OF_MEMORY" in text
    assert "1 GPU, 90 GiB: does not fit: asks 90 GiB per GPU" in text
    for node in lab.record.nodes:
        assert f"{node}: its largest GPU has" in text  # each node's number, in words
    assert "memory: memory percentage must be a whole number 1..100%, got '200%'" in text
    assert "cores: cores must be a whole number 0..100, got 120" in text
    assert "gpu_type: gpu_type 'nosuchgpu' matches no GPU model" in text


def test_cluster_view_notebook_shows_widgets_and_submits_from_the_picker(
    lab: LabHandle, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = _execute("02-cluster-view", lab, namespace, monkeypatch)
    text = _text(notebook)
    assert _kinds(notebook).count("application/vnd.jupyter.widget-view+json") == 2
    assert "fits: True on" in text and "submit enabled: True" in text
    assert f"'{namespace}/vslice-" in text  # the refreshed view lists the picker's pod
    assert text.count("NVIDIA-H100-80GB-HBM3") >= 8


def test_capacity_planning_notebook_plots_what_fits_where(
    lab: LabHandle, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = _execute("03-capacity-planning", lab, namespace, monkeypatch)
    text = _text(notebook)
    assert _kinds(notebook).count("image/png") == 2
    assert "1 GPU, 96 GiB, 25% cores: does not fit" in text
    assert "insufficient_memory" in text
    total = [line for line in text.splitlines() if "total 8Gi slices that still fit:" in line]
    assert total and int(total[0].rsplit(":", 1)[1]) > 0
    assert os.environ.get("VSLICE_NAMESPACE") == namespace
