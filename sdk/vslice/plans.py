"""``Plan``: would a slice fit the cluster now, where, and if not, why (per node).

A plan wraps the core engine's :class:`vslice_core.model.Decision` (the same engine the
extender runs) with the request it answers. It renders as HTML in a notebook and as text
(:mod:`vslice.views` draws it, through :mod:`vslice.rendering`), and ``to_dict()`` has the
shape ``vslice plan --json`` prints.

A pod on the DRA path (its ``spec.resourceClaims`` name claims of vslice's device class) is
planned with the same engine: its request is read back from the claim or template
(:func:`vslice_core.dra.claims.request_of`), and the plan says that kube-scheduler's DRA
allocator places the pod and what the engine's answer leaves out there (``Plan.notes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from vslice_core import whynot
from vslice_core.gputypes import type_matches
from vslice_core.model import Decision, GpuGrant, PodRequest
from vslice_core.plan import plan_json
from vslice_core.requests import pod_request

from vslice import dra, manifests, rendering
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
    path: Literal["extender", "dra"] = "extender"
    """``dra``: the pod's claims name vslice's devices and kube-scheduler places it."""
    notes: tuple[str, ...] = ()
    """DRA path: what the engine's answer leaves out (policies DRA cannot express, ...)."""

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
        """The ``vslice plan --json`` shape (the core builds both); a DRA plan adds ``dra``
        (``path``, ``driver``, ``placed_by``, ``notes``)."""
        result = plan_json(self.decision, self.request)
        if self.path == "dra":
            result["dra"] = dra.plan_json(self.notes)
        return result

    def _repr_html_(self) -> str:
        return rendering.as_html(self)

    def __str__(self) -> str:
        return rendering.as_text(self)

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
    claims: dra.Lookup | Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None,
) -> Plan:
    """Plan a Pod or Job manifest against a snapshot with the core engine (every node's
    verdict). Raises InvalidRequest for a bad manifest or a GPU type/UUID the cluster lacks.

    A pod whose ``spec.resourceClaims`` name vslice claims is planned on the DRA path: its
    claims and templates are found through ``claims`` (a lookup or a mapping keyed ``(kind,
    namespace, name)``) and, for a ``Slice(path="dra")``, the template the slice makes; one
    that is not found is an InvalidRequest naming the pod's field."""
    pod = _pod(manifest, namespace)
    found = dra.pod_request(pod, dra.chain(_slice_templates(pod, slice, namespace), claims))
    if found is None:
        request = _pod_request(pod)
        notes: tuple[str, ...] = ()
    else:
        _refuse_missing(found, namespace)
        request, notes = found.request, tuple(dra.notes(pod, found.notes))
    check_against_cluster(request, snapshot)
    return Plan(
        decision=snapshot.decide(request, "extender" if found is None else "dra"),
        slice=slice,
        namespace=namespace,
        gpu_models=tuple(snapshot.gpu_models()),
        request=request,
        path="extender" if found is None else "dra",
        notes=notes,
    )


def _slice_templates(
    pod: Mapping[str, Any], wanted: Slice | None, namespace: str
) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """The template a DRA slice makes, for whichever container it was put on."""
    if wanted is None or wanted.path != "dra":
        return {}
    found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        template = manifests.claim_template(wanted, str(container.get("name") or ""), namespace)
        found[("ResourceClaimTemplate", namespace, template["metadata"]["name"])] = template
    return found


def _refuse_missing(found: dra.DraRequest, namespace: str) -> None:
    if not found.missing:
        return
    ref = found.missing[0]
    key = "resourceClaimName" if ref.kind == "ResourceClaim" else "resourceClaimTemplateName"
    raise InvalidRequest(
        f"{ref.field}.{key} names {ref.label(namespace)}, which does not exist: create it "
        f"first, or plan the manifest with the {ref.kind} beside the pod (one YAML file, "
        "documents separated by '---')",
        field=f"{ref.field}.{key}",
        value=ref.name,
    )


def check_against_cluster(request: PodRequest, snapshot: ClusterSnapshot) -> None:
    """GPU types and UUIDs the request names must exist in the cluster (valid choices listed)."""
    models = snapshot.gpu_models()
    for wanted in request.gpu_types:
        if not any(type_matches(wanted, model) for model in models):
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


def _pod(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod a Pod or Job manifest describes, in ``namespace``."""
    metadata, spec = manifests.pod_template(manifest)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**metadata, "namespace": namespace},
        "spec": spec,
    }


def _pod_request(pod: dict[str, Any]) -> PodRequest:
    """The core's normalized request for the pod (the extender path)."""
    request = pod_request(pod)
    if not request.containers:
        raise InvalidRequest(
            "the pod asks for no GPU (no container sets nvidia.com/gpu, gpumem or gpucores)",
            field="spec.containers",
        )
    return request
