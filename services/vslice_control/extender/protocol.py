"""The scheduler-extender wire format (kube-scheduler's ``extender/v1`` JSON, PascalCase).

- filter:     ``ExtenderArgs{Pod, Nodes | NodeNames}`` -> ``ExtenderFilterResult``
- prioritize: ``ExtenderArgs`` -> ``[{"Host", "Score"}]`` (0..10)
- bind:       ``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}`` -> ``{"Error"}``

The scheduler sends node names when the extender is ``nodeCacheCapable`` and whole Node
objects otherwise; the answer uses the same form and only ever names nodes that were sent.
Parsing raises :class:`vslice_core.errors.InvalidRequest` naming the field and the value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vslice_core.errors import InvalidRequest
from vslice_core.model import REASONS

MAX_SCORE = 10


@dataclass(frozen=True)
class ExtenderArgs:
    pod: dict[str, Any]
    node_names: list[str]
    nodes: list[dict[str, Any]] | None  # whole Node objects (not nodeCacheCapable)

    @property
    def pod_key(self) -> str:
        metadata = self.pod.get("metadata") or {}
        return f"{metadata.get('namespace', 'default')}/{metadata.get('name', '')}"


@dataclass(frozen=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def _load(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"body is not JSON: {exc}", field="body", value=body[:80]) from exc
    if not isinstance(data, dict):
        raise InvalidRequest(
            f"body must be a JSON object, got {type(data).__name__}", field="body", value=data
        )
    return data


def parse_extender_args(body: bytes) -> ExtenderArgs:
    data = _load(body)
    pod = data.get("Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise InvalidRequest(
            f"Pod must be a Pod object, got {type(pod).__name__}", field="Pod", value=pod
        )
    names = data.get("NodeNames")
    node_list = data.get("Nodes")
    if names is not None:
        # map(type) runs in C: this check is on every filter, over every node name sent.
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise InvalidRequest(
                f"NodeNames must be a list of names, got {names!r}", field="NodeNames", value=names
            )
        return ExtenderArgs(pod=pod, node_names=list(names), nodes=None)
    if isinstance(node_list, dict):
        items = node_list.get("items") or []
        if not isinstance(items, list) or not all(_node_name(i) for i in items):
            raise InvalidRequest(
                "Nodes.items must be Node objects with metadata.name",
                field="Nodes.items",
                value=items,
            )
        return ExtenderArgs(pod=pod, node_names=[_node_name(i) for i in items], nodes=items)
    raise InvalidRequest(
        "one of NodeNames or Nodes must be given, got neither", field="NodeNames", value=None
    )


def _node_name(item: Any) -> str:
    if isinstance(item, Mapping) and isinstance(item.get("metadata"), Mapping):
        name = item["metadata"].get("name")
        return name if isinstance(name, str) else ""
    return ""


def parse_binding_args(body: bytes) -> BindingArgs:
    data = _load(body)
    values = {}
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise InvalidRequest(
                f"{key} must be a non-empty string, got {value!r}", field=key, value=value
            )
        values[key] = value
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


def encode_filter(
    args: ExtenderArgs,
    passed: list[str],
    failed: Mapping[str, str] | None = None,
    unresolvable: Mapping[str, str] | None = None,
    error: str = "",
) -> dict[str, Any]:
    """An ExtenderFilterResult in the form the scheduler asked in; unsent names are dropped."""
    sent = set(args.node_names)
    keep = [name for name in passed if name in sent]
    result: dict[str, Any] = {
        "FailedNodes": {k: v for k, v in (failed or {}).items() if k in sent},
        "FailedAndUnresolvableNodes": {k: v for k, v in (unresolvable or {}).items() if k in sent},
        "Error": error,
    }
    if args.nodes is None:
        result["NodeNames"] = keep
        result["Nodes"] = None
    else:
        chosen = set(keep)
        result["Nodes"] = {"items": [n for n in args.nodes if _node_name(n) in chosen]}
        result["NodeNames"] = None
    return result


def encode_priorities(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    return [
        {"Host": host, "Score": max(0, min(MAX_SCORE, score))} for host, score in scores.items()
    ]


def summarize_reasons(reasons: Mapping[str, int]) -> str:
    """``"insufficient_memory x2, slots_exhausted x1"``, in the engine's check order."""
    order = {code: rank for rank, code in enumerate(REASONS)}
    parts = sorted(reasons.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))
    return ", ".join(f"{code} x{count}" for code, count in parts if count)
