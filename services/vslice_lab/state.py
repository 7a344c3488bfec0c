"""The record of a running lab (``<state>/lab.json``): what ``down`` and ``status`` read.

It is rewritten after every component starts, so a crash in the middle of ``up`` still leaves
enough behind for the next ``up`` (or ``down``) to stop what was started.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
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
