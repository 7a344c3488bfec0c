"""What-if placement: the exact object ``vslice plan --json`` prints (DESIGN.md).

The pod goes through the webhook's normalization (:func:`vslice_core.requests.pod_request`)
and the extender's engine (:meth:`vslice_core.ledger.Ledger.decide`, explain mode), so the
answer is the one the cluster would give.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vslice_core.cluster import Cluster, build_ledger
from vslice_core.errors import InvalidRequest
from vslice_core.model import REASONS, Decision, NodeVerdict, PodRequest
from vslice_core.requests import pod_request
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames
from vslice_core.whynot import explain

_WORKLOADS_WITH_TEMPLATE = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


def pod_manifest(data: Any) -> Mapping[str, Any]:
    """The Pod in a manifest; a workload (Deployment, Job, ...) yields its pod template."""
    if not isinstance(data, Mapping):
        raise InvalidRequest(
            f"pod must be a Pod manifest (a mapping), got {type(data).__name__}",
            field="pod",
            value=data,
        )
    kind = data.get("kind", "Pod")
    if kind == "Pod":
        return data
    spec = data.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if kind in _WORKLOADS_WITH_TEMPLATE and isinstance(template, Mapping):
        metadata = dict(template.get("metadata") or {})
        outer = data.get("metadata")
        if isinstance(outer, Mapping):
            metadata.setdefault("namespace", outer.get("namespace"))
            metadata.setdefault("name", outer.get("name"))
        return {**template, "kind": "Pod", "metadata": metadata}
    if kind in _WORKLOADS_WITH_TEMPLATE:
        raise InvalidRequest(
            f"spec.template of a {kind} must be a pod template (a mapping), got {template!r}",
            field="spec.template",
            value=template,
        )
    choices = ", ".join(("Pod", *_WORKLOADS_WITH_TEMPLATE))
    raise InvalidRequest(f"kind must be one of {choices}, got {kind!r}", field="kind", value=kind)


def plan_decision(
    cluster: Cluster, manifest: Any, names: ResourceNames = DEFAULT_RESOURCE_NAMES
) -> tuple[Decision, PodRequest]:
    """The engine's explained decision for the pod (with suggestions when it does not fit)."""
    request = pod_request(pod_manifest(manifest), names)
    if not request.containers:
        managed = ", ".join(names.managed())
        raise InvalidRequest(
            f"spec.containers must request a GPU ({managed}) in at least one container, got none",
            field="spec.containers",
            value=None,
        )
    ledger = build_ledger(cluster)
    nodes = [node.name for node in cluster.nodes]
    return ledger.decide(request, nodes, explain=True, suggest=True), request


def plan(
    cluster: Cluster, manifest: Any, names: ResourceNames = DEFAULT_RESOURCE_NAMES
) -> dict[str, Any]:
    """Where the pod would go in this cluster, and why each node can or cannot take it."""
    decision, request = plan_decision(cluster, manifest, names)
    return plan_json(decision, request)


def _reasons(verdict: NodeVerdict) -> dict[str, int]:
    return {code: verdict.reasons[code] for code in REASONS if code in verdict.reasons}


def _node_json(verdict: NodeVerdict) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "fits": verdict.fits,
        "score": verdict.score,
        "reasons": _reasons(verdict),
    }
    if verdict.room is not None:
        entry["room"] = verdict.room.model_dump()
    return entry


def plan_json(decision: Decision, request: PodRequest | None = None) -> dict[str, Any]:
    """The DESIGN.md JSON object of a decision, plus the numbers behind a "does not fit":
    ``nodes[*].room`` (what the node could still give), ``suggestions`` (changed requests
    the engine found to fit now) and ``why_not`` (the text every view prints; null when the
    pod fits)."""
    containers = []
    if decision.allocation is not None:
        containers = [
            {
                "name": container.name,
                "gpus": [
                    {"uuid": g.uuid, "memory_mib": g.memory_mib, "cores": g.cores}
                    for g in container.gpus
                ],
            }
            for container in decision.allocation.containers
        ]
    nodes = {name: _node_json(verdict) for name, verdict in decision.nodes.items()}
    why_not = None
    if request is not None and not decision.fits:
        why_not = explain(decision, request).text()
    return {
        "fits": decision.fits,
        "node": decision.node,
        "containers": containers,
        "nodes": nodes,
        "suggestions": [s.model_dump() for s in decision.suggestions],
        "why_not": why_not,
    }
