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


ANONYMOUS = (
    "the webhook cannot tell who calls it (client_ca_file is not set), and it writes "
    "ResourceClaimTemplates, with its own identity, only for the API server: set "
    "client_ca_file and client_names for the API server's client certificate (docs/webhook.md, "
    "Only the API server), or use the extender path (namespace label vslice.io/path=extender)"
)


class AnonymousCallers:
    """The template store of a webhook whose callers are not authenticated.

    Without a client CA anyone who reaches the port can POST a review naming any namespace;
    the webhook would create templates there with its own rights. So it creates and reads
    nothing, and a DRA pod is refused with :data:`ANONYMOUS`.
    """

    def create(self, template: Mapping[str, Any]) -> bool:
        raise ClusterError(ANONYMOUS, code=403)

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise ClusterError(ANONYMOUS, code=403)


def store_for_callers(store: TemplateStore | None, authenticated: bool) -> TemplateStore | None:
    """``store`` when every caller of ``/mutate`` is authenticated (``client_ca_file`` set),
    else one that never writes."""
    if store is None or authenticated:
        return store
    return AnonymousCallers()


def ensure_template(store: TemplateStore, template: Mapping[str, Any]) -> str | None:
    """Make sure ``template`` exists; why the pod must be refused, or None.

    An existing template of that name is used only when its spec says exactly what vslice
    would write (:func:`template_difference`). The name is a hash anyone can compute and the
    ``managed-by`` label is one a tenant with ``edit`` can set, so neither proves the template
    is vslice's: a tenant could create ``vslice-<hash>`` first with selectors, constraints, an
    opaque driver config or ``adminAccess`` of its own, and every pod of that shape in the
    namespace would get what it asks.
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
            difference = template_difference(stored, template)
            if difference is None:
                return None
            return (
                f"ResourceClaimTemplate {label} exists but was not written by vslice: "
                f"{difference}, so the pod would get what that template asks instead of its "
                "GPU limits; delete the template (vslice creates it again with the spec the "
                "limits ask) or reference a template of another name instead of nvidia.com/* "
                "limits"
            )
    except ClusterError as exc:
        return f"cannot create ResourceClaimTemplate {label} for the pod's GPU claim: {exc}"
    return f"ResourceClaimTemplate {label} was deleted twice while being created: try again"


def same_template(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the stored template's spec says exactly what ``wanted`` says."""
    return template_difference(stored, wanted) is None


def template_difference(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> str | None:
    """The first field where the stored template's ``spec`` says something ``wanted`` does not,
    in words (``spec.spec.devices.requests[0].exactly.selectors is [...] there, vslice writes
    none``); None when they agree.

    Two differences are not differences: the API server writes quantities in canonical form
    (8192Mi comes back as 8Gi), and it may add a field with its empty value (``adminAccess:
    false``, ``tolerations: []``). Any other field the stored spec has and ``wanted`` lacks is
    one, since every field of a claim spec changes what the claim gets.
    """
    return _difference(wanted.get("spec"), stored.get("spec"), "spec")


_NEUTRAL: tuple[object, ...] = (None, False, "", [], {})
"""Values an added field may have and change nothing: what the API server defaults to."""


def _difference(wanted: object, stored: object, at: str) -> str | None:
    if isinstance(wanted, Mapping) and isinstance(stored, Mapping):
        for key, value in wanted.items():
            if key not in stored:
                return f"{at}.{key} is missing there, vslice writes {value!r}"
            found = _difference(value, stored[key], f"{at}.{key}")
            if found is not None:
                return found
        for key in stored.keys() - wanted.keys():
            if not any(
                stored[key] == neutral and type(stored[key]) is type(neutral)
                for neutral in _NEUTRAL
            ):
                return f"{at}.{key} is {stored[key]!r} there, vslice writes none"
        return None
    if isinstance(wanted, list) and isinstance(stored, list):
        if len(wanted) != len(stored):
            return f"{at} has {len(stored)} entries there, vslice writes {len(wanted)}"
        for index, (a, b) in enumerate(zip(wanted, stored, strict=True)):
            found = _difference(a, b, f"{at}[{index}]")
            if found is not None:
                return found
        return None
    if _same_value(wanted, stored):
        return None
    return f"{at} is {stored!r} there, vslice writes {wanted!r}"


def _same_value(wanted: object, stored: object) -> bool:
    if type(wanted) is type(stored) and wanted == stored:
        return True
    if isinstance(wanted, str) and isinstance(stored, str):
        try:
            return parse_quantity(wanted, "quantity") == parse_quantity(stored, "quantity")
        except InvalidRequest:
            return False
    return False
