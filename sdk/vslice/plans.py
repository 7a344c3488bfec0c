"""``Plan``: would a slice fit the cluster now, where, and if not, why (per node).

A plan wraps the core engine's :class:`vslice_core.model.Decision` (the same engine the
extender runs) with the request it answers. It renders as HTML in a notebook and as text,
and ``to_dict()`` has the shape ``vslice plan --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from vslice_core import whynot
from vslice_core.model import Decision, GpuGrant, PodRequest
from vslice_core.plan import plan_json
from vslice_core.requests import pod_request

from vslice import manifests
from vslice.errors import InvalidRequest, NoFit
from vslice.slices import Slice
from vslice.snapshot import ClusterSnapshot

# The reason words live in the core so every view says the same; re-exported here.
REASON_TEXT: Final[dict[str, str]] = whynot.REASON_TEXT


def explain(reason: str) -> str:
    """Human words for an engine reason code (the code itself when unknown)."""
    return whynot.reason_text(reason)


@dataclass(frozen=True)
class Plan:
    """The engine's answer for one request against one cluster state."""

    decision: Decision
    slice: Slice | None = None
    namespace: str = "default"
    gpu_models: tuple[str, ...] = field(default=())
    request: PodRequest | None = None

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

    def explanation(self) -> whynot.WhyNot:
        """The decision in words (the same text ``vslice plan`` prints)."""
        request = self.request or PodRequest()
        return whynot.explain(self.decision, request)

    def why_not(self) -> str:
        """Why it does not fit, with numbers, over several lines: the cause, one line per
        node, and what would fit now. Empty when the request fits."""
        return "" if self.fits else self.explanation().text()

    def headline(self) -> str:
        """One line: ``fits on node-a`` or the cause and the best suggestion."""
        return self.explanation().one_line()

    def raise_for_fit(self) -> Plan:
        """Raise :class:`vslice.errors.NoFit` (with ``.reasons``) unless the request fits."""
        if not self.fits:
            wanted = self.slice.describe() if self.slice else "the request"
            raise NoFit(f"{wanted}: {self.why_not()}", reasons=self.reasons)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The ``vslice plan --json`` shape (the core builds both)."""
        return plan_json(self.decision, self.request)

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
        request=request,
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
