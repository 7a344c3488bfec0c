"""Running the example notebooks headless, as a user would: a fresh kernel, ``KUBECONFIG`` at a
lab and ``VSLICE_NAMESPACE`` at the test's own namespace. Shared by the notebook tests on the
shared lab (with its real node) and on the simulated-only lab."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def execute(name: str, kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run every cell of ``notebooks/<name>.ipynb`` in order (Run All); a cell that raises fails
    the test with the cell and its traceback."""
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    for cell in notebook.cells:
        assert cell.get("outputs", []) == [], f"{name}: commit notebooks without outputs"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("VSLICE_NAMESPACE", namespace)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    ).execute()
    return notebook


def outputs(notebook: Any) -> list[dict[str, Any]]:
    return [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]


def text(notebook: Any) -> str:
    parts = []
    for out in outputs(notebook):
        if out.output_type == "stream":
            parts.append(out.text)
        for kind in ("text/plain", "text/html"):
            parts.append(out.get("data", {}).get(kind, ""))
    return "\n".join(parts)


def kinds(notebook: Any) -> list[str]:
    return [kind for out in outputs(notebook) for kind in out.get("data", {})]


def pods_left(core: Any, namespace: str) -> list[str]:
    """The pods of ``namespace`` not being deleted: what a notebook left behind."""
    items = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
    return [
        pod["metadata"]["name"] for pod in items if not pod["metadata"].get("deletionTimestamp")
    ]
