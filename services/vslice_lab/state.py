"""The record of a running lab (``<state>/lab.json``): what ``down`` and ``status`` read.

It is rewritten after every component starts, so a crash in the middle of ``up`` still leaves
enough behind for the next ``up`` (or ``down``) to stop what was started.

Outside any state directory, ``vslice lab up`` notes the state directory it started in
``$XDG_STATE_HOME/vslice/last-lab`` (:func:`remember`), which the other ``vslice lab``
commands fall back to when ``--state-dir`` is not given and ``.lab`` holds no lab (:func:`find`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vslice_lab.layout import Layout
from vslice_lab.processes import ProcessRecord

FORMAT_VERSION = 1


@dataclass
class LabRecord:
    """Ports, processes and options of one lab."""

    version: str
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    etcd_data: str = ""
    inventory: str = ""
    extender_url: str = ""
    webhook: bool = False
    nodes: list[str] = field(default_factory=list)
    """Every node of the lab, simulated and real."""
    real_nodes: list[str] = field(default_factory=list)
    """Nodes run by a real kubelet and containerd on this machine."""
    real_node_note: str = ""
    """Why an inventory node marked ``kubelet: true`` is simulated instead (empty: none is)."""
    host: dict[str, Any] | None = None
    """The host as it was before real nodes changed it (``hostchanges.HostSnapshot``)."""

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "version": self.version,
            "ports": self.ports,
            "processes": [p.to_json() for p in self.processes],
            "etcd_data": self.etcd_data,
            "inventory": self.inventory,
            "extender_url": self.extender_url,
            "webhook": self.webhook,
            "nodes": self.nodes,
            "real_nodes": self.real_nodes,
            "real_node_note": self.real_node_note,
            "host": self.host,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabRecord:
        return cls(
            version=str(data["version"]),
            ports={str(k): int(v) for k, v in data.get("ports", {}).items()},
            processes=[ProcessRecord.from_json(p) for p in data.get("processes", [])],
            etcd_data=str(data.get("etcd_data", "")),
            inventory=str(data.get("inventory", "")),
            extender_url=str(data.get("extender_url", "")),
            webhook=bool(data.get("webhook", False)),
            nodes=[str(n) for n in data.get("nodes", [])],
            real_nodes=[str(n) for n in data.get("real_nodes", [])],
            real_node_note=str(data.get("real_node_note", "")),
            host=dict(data["host"]) if isinstance(data.get("host"), dict) else None,
        )


def save(layout: Layout, record: LabRecord) -> None:
    """Write the record atomically (a reader never sees half a file)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    partial = layout.record.with_suffix(".json.tmp")
    partial.write_text(json.dumps(record.to_json(), indent=1) + "\n")
    os.replace(partial, layout.record)


def load(layout: Layout) -> LabRecord | None:
    """The record, or None when there is none or it is unreadable (treated as no lab)."""
    try:
        data = json.loads(layout.record.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        return None
    try:
        return LabRecord.from_json(data)
    except (KeyError, TypeError, ValueError):
        return None


def forget(layout: Layout) -> None:
    layout.record.unlink(missing_ok=True)


# Where ``vslice lab up`` notes the state directory it started, so that ``status``, ``down``,
# ``import-image`` and ``kubectl`` find a lab started with ``--state-dir`` (or from another
# directory) without being told again. One file per user: the last ``up`` wins.
LAST_FILE_NAME = "last-lab"


def last_file() -> Path:
    """``$XDG_STATE_HOME/vslice/last-lab`` (``~/.local/state/vslice/last-lab``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vslice" / LAST_FILE_NAME


def remember(layout: Layout) -> None:
    """Note ``layout`` as the lab the next command without ``--state-dir`` falls back to."""
    target = last_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".tmp")
    partial.write_text(f"{layout.root}\n")
    os.replace(partial, target)


def remembered() -> Layout | None:
    """The lab the last ``up`` noted, None when none is noted or none runs there any more."""
    try:
        noted = last_file().read_text().strip()
    except OSError:
        return None
    if not noted:
        return None
    layout = Layout.at(noted)
    return layout if load(layout) is not None else None


def forget_remembered(layout: Layout) -> None:
    """Drop the note when it names ``layout`` (after ``down``); a note naming another lab stays."""
    try:
        noted = last_file().read_text().strip()
    except OSError:
        return
    if noted == str(layout.root):
        last_file().unlink(missing_ok=True)


def find(given: Path | None, default: Path) -> tuple[Layout, bool]:
    """The lab a command acts on, and whether it came from the note of the last ``up``.

    ``given`` (``--state-dir``) always wins. Without it: ``default`` (``.lab`` here) when a
    lab is recorded there, else the lab the last ``up`` noted, else ``default``, whose missing
    record the caller reports as "no lab recorded"."""
    if given is not None:
        return Layout.at(given), False
    here = Layout.at(default)
    if load(here) is not None:
        return here, False
    noted = remembered()
    if noted is not None:
        return noted, True
    return here, False
