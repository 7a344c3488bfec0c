"""A GPU pod on the DRA path: its HAMi-style limits become a ResourceClaimTemplate it references.

The pod keeps its manifest (``nvidia.com/gpu``, ``gpumem``, ``gpucores`` limits and the
type/uuid/numa annotations); the webhook turns the normalized request into one claim of
``gpu.vslice.io`` (``vslice_core.dra.claims.claim_spec``: one request per GPU container, named
after it) and patches the pod to use it:

- the vslice resources (``ResourceNames.managed()`` and the priority) are removed from the
  GPU containers' ``limits`` and ``requests`` (no node advertises them on the DRA path, so
  they would keep the pod pending); every other resource stays;
- each GPU container gets ``resources.claims: [{name: vslice-gpu, request: <its request>}]``;
- the pod gets ``spec.resourceClaims: [{name: vslice-gpu, resourceClaimTemplateName: ...}]``,
  after any claims it already has.

The template is named ``vslice-`` and a hash of the claim spec, so every pod of the same shape
in a namespace shares one template and creating it again is harmless (409 AlreadyExists).
``spec.schedulerName`` is left alone: kube-scheduler's own DRA allocator places the pod.

Everything here is pure; :func:`ensure_template` does the one side effect through a
:class:`TemplateStore` the caller provides (``vslice_kube.claimtemplates`` in production).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from vslice_core.dra import claims
from vslice_core.errors import ClusterError, InvalidRequest
from vslice_core.model import PodRequest
from vslice_core.quantities import parse_quantity
from vslice_core.resources import ResourceNames

from vslice_control.webhook.jsonpatch import PodPatch
from vslice_control.webhook.podspec import containers

MANAGED_BY = {"app.kubernetes.io/managed-by": "vslice"}
INSTEAD = (
    "ask nvidia.com/gpumem in MiB, or 100 percent for the whole card, or use the extender "
    "path (namespace label vslice.io/path=extender)"
)


@dataclass(frozen=True)
class Conversion:
    template: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def claim_template(namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate for a claim spec (``claims.claim_spec``) in ``namespace``."""
    return claims.claim_template(spec, namespace, MANAGED_BY)


def convert(
    patch: PodPatch, request: PodRequest, names: ResourceNames, namespace: str
) -> Conversion:
    """Record the pod's changes in ``patch`` and return the template it needs.

    Raises :class:`InvalidRequest` (the webhook's denial) for what DRA cannot say: a memory
    percentage other than 100, or a pod that already has a claim named ``vslice-gpu``.
    """
    pod = patch.pod
    existing = (pod.get("spec") or {}).get("resourceClaims")
    for position, entry in enumerate(existing if isinstance(existing, list) else []):
        if isinstance(entry, Mapping) and entry.get("name") == claims.CLAIM_NAME:
            where = f"spec.resourceClaims[{position}].name"
            raise InvalidRequest(
                f"{where}: the pod already has a claim named {claims.CLAIM_NAME!r}, which the "
                "webhook adds for the pod's nvidia.com/* limits on the DRA path: rename that "
                "claim, or ask no nvidia.com/* limits and reference your own claim only",
                field=where,
                value=claims.CLAIM_NAME,
            )
    where_is = {c.name: c for c in containers(pod)}
    for wanted in request.containers:
        if wanted.memory_mib is None and wanted.memory_percent != 100:
            at = where_is.get(wanted.name)
            where = (
                f"{at.field}.resources.limits[{names.memory_percent!r}]"
                if at is not None
                else f"containers[{wanted.name}]"
            )
            raise InvalidRequest(
                f"{where}: {wanted.memory_percent} percent of a GPU's memory cannot be asked on "
                "the DRA path (a claim asks an absolute amount, the same on every card): "
                + INSTEAD,
                field=where,
                value=wanted.memory_percent,
            )
    spec = claims.claim_spec(request)
    template = claim_template(namespace, spec)
    vslice_resources = (*names.managed(), names.priority)
    for wanted in request.containers:
        at = where_is[wanted.name]
        kind = "initContainers" if at.init else "containers"
        base = ("spec", kind, at.index, "resources")
        for part in ("limits", "requests"):
            for resource in vslice_resources:
                patch.remove((*base, part, resource))
        patch.append(
            (*base, "claims"), {"name": claims.CLAIM_NAME, "request": claims.request_name(at.name)}
        )
    patch.append(
        ("spec", "resourceClaims"),
        {"name": claims.CLAIM_NAME, "resourceClaimTemplateName": template["metadata"]["name"]},
    )
    return Conversion(template=template, warnings=_warnings(request, names))


def _warnings(request: PodRequest, names: ResourceNames) -> list[str]:
    found = [f"{note}: not applied on the DRA path" for note in claims.unsupported(request)]
    if request.priority is not None:
        found.append(
            f"{names.priority} removed: kube-scheduler's DRA allocator has no slice priority"
        )
    held = [c.name for c in request.containers if c.init]
    if held:
        found.append(
            f"init container(s) {', '.join(held)}: on the DRA path their GPU share is "
            "allocated with the pod's claim and held until the pod ends"
        )
    return found


class TemplateStore(Protocol):
    """Where templates are created: ``vslice_kube.claimtemplates.ClaimTemplates``."""

    def create(self, template: Mapping[str, Any]) -> bool:
        """Create it; False when one of that name exists (409). ClusterError otherwise."""

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored template, None when there is none."""


def ensure_template(store: TemplateStore, template: Mapping[str, Any]) -> str | None:
    """Make sure ``template`` exists; why the pod must be refused, or None.

    An existing template of that name is fine when it says the same (the name is a hash of the
    spec, so it was made for a pod of the same shape); one that says something else was written
    by someone else under vslice's name, and the pod would get what that one asks.
    """
    metadata = template["metadata"]
    label = f"{metadata['namespace']}/{metadata['name']}"
    try:
        for _attempt in range(2):
            if store.create(template):
                return None
            stored = store.read(metadata["namespace"], metadata["name"])
            if stored is None:
                continue  # deleted between the create and the read: create it again
            if same_template(stored, template):
                return None
            return (
                f"ResourceClaimTemplate {label} exists with another spec than the one this "
                "pod's GPU limits ask for: it was not written by vslice; delete it (vslice "
                "creates it again) or reference your own template instead of nvidia.com/* limits"
            )
    except ClusterError as exc:
        return f"cannot create ResourceClaimTemplate {label} for the pod's GPU claim: {exc}"
    return f"ResourceClaimTemplate {label} was deleted twice while being created: try again"


def same_template(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the stored template's spec says what ``wanted`` says: the API server may add
    defaulted fields and writes quantities in canonical form (8192Mi comes back as 8Gi)."""
    return _covers(wanted.get("spec"), stored.get("spec"))


def _covers(wanted: object, stored: object) -> bool:
    if isinstance(wanted, Mapping):
        return isinstance(stored, Mapping) and all(
            key in stored and _covers(value, stored[key]) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(wanted)
            and all(_covers(a, b) for a, b in zip(wanted, stored, strict=True))
        )
    if wanted == stored:
        return True
    if isinstance(wanted, str) and isinstance(stored, str):
        try:
            return parse_quantity(wanted, "quantity") == parse_quantity(stored, "quantity")
        except InvalidRequest:
            return False
    return False
