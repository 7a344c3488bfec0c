"""``Plan``: would a slice fit the cluster now, where, and if not, why (per node).

A plan wraps the core engine's :class:`vslice_core.model.Decision` (the same engine the
extender runs) with the request it answers. It renders as HTML in a notebook and as text,
and ``to_dict()`` has the shape ``vslice plan --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from vslice_core.model import Decision, GpuGrant, PodRequest
from vslice_core.requests import pod_request

from vslice import manifests
from vslice.errors import InvalidRequest, NoFit
from vslice.slices import Slice
from vslice.snapshot import ClusterSnapshot

REASON_TEXT: Final[dict[str, str]] = {
    "unhealthy": "GPU reported unhealthy",
    "cordoned": "GPU cordoned by an operator",
    "type_mismatch": "GPU model not wanted (gpu_type / exclude_gpu_type)",
    "uuid_mismatch": "GPU UUID not wanted (gpu_uuid / exclude_gpu_uuid)",
    "slots_exhausted": "every slice slot of the GPU is taken",
    "mutex_busy": "GPU already holds a slice (mutex policy)",
    "insufficient_memory": "not enough free GPU memory",
    "insufficient_cores": "not enough free GPU cores",
    "exclusive_conflict": "a whole GPU was asked but the GPU is in use",
    "cores_exhausted": "every core of the GPU is taken",
    "numa_mismatch": "GPUs not on one NUMA node (numa_bind)",
    "too_few_gpus": "fewer usable GPUs on the node than asked",
    "quota_exceeded": "the namespace's GPU quota is used up",
}


def explain(reason: str) -> str:
    """Human words for an engine reason code (the code itself when unknown)."""
    return REASON_TEXT.get(reason, reason)


@dataclass(frozen=True)
class Plan:
    """The engine's answer for one request against one cluster state."""

    decision: Decision
    slice: Slice | None = None
    namespace: str = "default"
    gpu_models: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return self.decision.fits

    @property
    def node(self) -> str | None:
        return self.decision.node

    @property
    def grants(self) -> dict[str, list[GpuGrant]]:
        """Container name -> the GPUs it would get (empty when it does not fit)."""
        allocation = self.decision.allocation
        if allocation is None:
            return {}
        return {c.name: list(c.gpus) for c in allocation.containers}

    @property
    def reasons(self) -> dict[str, dict[str, int]]:
        """Node -> {reason code: count} for every node that cannot take the request."""
        return {
            name: dict(verdict.reasons)
            for name, verdict in sorted(self.decision.nodes.items())
            if not verdict.fits
        }

    def why_not(self) -> str:
        """One line per rejected node, in words, e.g. ``node-2: not enough free memory (x2)``."""
        lines = []
        for node, reasons in self.reasons.items():
            words = "; ".join(f"{explain(code)} (x{count})" for code, count in reasons.items())
            lines.append(f"{node}: {words or 'rejected'}")
        return "\n".join(lines) or "no node is available"

    def raise_for_fit(self) -> Plan:
        """Raise :class:`vslice.errors.NoFit` (with ``.reasons``) unless the request fits."""
        if not self.fits:
            wanted = self.slice.describe() if self.slice else "the request"
            raise NoFit(f"{wanted} does not fit:\n{self.why_not()}", reasons=self.reasons)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The ``vslice plan --json`` shape."""
        containers = [
            {"name": name, "gpus": [g.model_dump(exclude={"index"}) for g in gpus]}
            for name, gpus in self.grants.items()
        ]
        nodes = {name: v.model_dump() for name, v in sorted(self.decision.nodes.items())}
        return {"fits": self.fits, "node": self.node, "containers": containers, "nodes": nodes}

    def _repr_html_(self) -> str:
        from vslice import views

        return views.plan_html(self)

    def __str__(self) -> str:
        from vslice import views

        return views.plan_text(self)

    def __repr__(self) -> str:
        where = f"fits on {self.node}" if self.fits else "does not fit"
        return f"<Plan: {self.slice or 'request'} {where}>"


def slice_manifest(wanted: Slice) -> dict[str, Any]:
    """A stand-in pod carrying only the slice, for planning without a real workload."""
    return manifests.pod_manifest("plan", slice=wanted, name="plan")


def plan_manifest(
    snapshot: ClusterSnapshot,
    manifest: dict[str, Any],
    *,
    slice: Slice | None = None,
    namespace: str = "default",
) -> Plan:
    """Plan a Pod or Job manifest against a snapshot with the core engine (every node's
    verdict). Raises InvalidRequest for a bad manifest or a GPU type/UUID the cluster lacks."""
    request = _pod_request(manifest, namespace)
    check_against_cluster(request, snapshot)
    return Plan(
        decision=snapshot.decide(request),
        slice=slice,
        namespace=namespace,
        gpu_models=tuple(snapshot.gpu_models()),
    )


def check_against_cluster(request: PodRequest, snapshot: ClusterSnapshot) -> None:
    """GPU types and UUIDs the request names must exist in the cluster (valid choices listed)."""
    models = snapshot.gpu_models()
    for wanted in request.gpu_types:
        if not any(wanted in model.lower() for model in models):
            raise InvalidRequest(
                f"gpu_type {wanted!r} matches no GPU model in the cluster; "
                f"models present: {', '.join(models) or 'none'}",
                field="gpu_type",
                value=wanted,
            )
    uuids = snapshot.gpu_uuids()
    for uuid in request.gpu_uuids:
        if uuid not in uuids:
            shown = ", ".join(uuids[:12]) + (", ..." if len(uuids) > 12 else "")
            raise InvalidRequest(
                f"gpu_uuid {uuid!r} is not a GPU of the cluster; GPUs present: {shown or 'none'}",
                field="gpu_uuid",
                value=uuid,
            )


def _pod_request(manifest: dict[str, Any], namespace: str) -> PodRequest:
    """The core's normalized request for the pod a Pod or Job manifest describes."""
    metadata, spec = manifests.pod_template(manifest)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**metadata, "namespace": namespace},
        "spec": spec,
    }
    request = pod_request(pod)
    if not request.containers:
        raise InvalidRequest(
            "the pod asks for no GPU (no container sets nvidia.com/gpu, gpumem or gpucores)",
            field="spec.containers",
        )
    return request
