"""The SDK's side of the DRA path: which claims a pod uses, what they ask, and what to say.

On the DRA path (``gpu.vslice.io``, Kubernetes 1.36 consumable capacity) a pod gets its slice
through a ResourceClaim: ``spec.resourceClaims`` names a claim or a ResourceClaimTemplate, its
containers name the claim in ``resources.claims``, and kube-scheduler's own DRA allocator
places the pod. The views read claims back with :mod:`vslice_core.dra`; this module holds the
pure steps around that (no Kubernetes client, so ``vslice plan`` stays quick to start):

- :func:`claim_refs` and :func:`pod_request` read the claims of a pod as the engine's request,
  through a lookup the caller provides (a dump, a manifest file, the live cluster);
- :func:`notes` says what the vslice engine's answer leaves out on this path (node and GPU
  policies DRA cannot express, selectors the plan cannot judge);
- :func:`template_name` and :func:`claim_template` name and build the ResourceClaimTemplate
  the SDK creates for a ``Slice(path="dra")``, with the webhook's naming (``vslice-`` and a
  hash of the claim spec), so the same request shares one template whoever made it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from vslice_core.cluster import load_yaml_documents
from vslice_core.dra import DRIVER, claims
from vslice_core.dra.claims import CLAIM_NAME as CLAIM_NAME  # the SDK's spelling
from vslice_core.dra.claims import claim_template as claim_template
from vslice_core.dra.claims import template_name as template_name
from vslice_core.errors import InvalidRequest
from vslice_core.model import ContainerRequest, PodRequest
from vslice_core.requests import pod_request as annotated_request

CLAIM_KINDS: Final = ("ResourceClaim", "ResourceClaimTemplate")
PLACED_BY: Final = (
    f"on the DRA path kube-scheduler's DRA allocator places this pod (driver {DRIVER}); "
    "the answer above is the vslice engine's for the same request"
)
NOTE_PREFIX: Final = "on the DRA path kube-scheduler places this pod: "

Kind = Literal["ResourceClaim", "ResourceClaimTemplate"]
Lookup = Callable[[str, str, str], Mapping[str, Any] | None]
"""``(kind, namespace, name) -> object or None``: where a pod's claims and templates are read."""


@dataclass(frozen=True)
class ClaimRef:
    """One entry of a pod's ``spec.resourceClaims``: the claim it names, or the template."""

    entry: str
    kind: Kind
    name: str
    field: str

    def label(self, namespace: str) -> str:
        return f"{self.kind} {namespace}/{self.name}"


@dataclass(frozen=True)
class DraRequest:
    """A DRA pod's claims read as the engine's request, with what the plan cannot judge."""

    request: PodRequest
    notes: tuple[str, ...] = ()
    missing: tuple[ClaimRef, ...] = ()
    claims: tuple[str, ...] = ()
    """``namespace/name`` of the claims and templates the request was read from."""


def _invalid(field: str, expectation: str, value: object) -> InvalidRequest:
    return InvalidRequest(f"{field} must be {expectation}, got {value!r}", field=field, value=value)


def claim_refs(spec: Mapping[str, Any]) -> list[ClaimRef]:
    """The claims a pod spec names, in order; a malformed entry is an InvalidRequest naming
    the field (the API server would refuse it too)."""
    entries = spec.get("resourceClaims") or []
    if not isinstance(entries, list):
        raise _invalid("spec.resourceClaims", "a list", entries)
    refs = []
    for i, entry in enumerate(entries):
        where = f"spec.resourceClaims[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise _invalid(where, "an object with a name", entry)
        claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if isinstance(claim, str) and claim and not template:
            refs.append(ClaimRef(entry["name"], "ResourceClaim", claim, where))
        elif isinstance(template, str) and template and not claim:
            refs.append(ClaimRef(entry["name"], "ResourceClaimTemplate", template, where))
        else:
            raise _invalid(
                where, "naming exactly one of resourceClaimName, resourceClaimTemplateName", entry
            )
    return refs


def generated_claims(pod: Mapping[str, Any]) -> dict[str, str]:
    """Claim entry -> the claim kube-controller-manager made for it from its template
    (``status.resourceClaimStatuses``; empty until the controller has made them)."""
    status = pod.get("status")
    statuses = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    return {
        str(item["name"]): str(item["resourceClaimName"])
        for item in (statuses if isinstance(statuses, list) else [])
        if isinstance(item, Mapping) and item.get("name") and item.get("resourceClaimName")
    }


def _read_claim(found: Mapping[str, Any], label: str, namespace: str, name: str) -> Any:
    try:
        return claims.request_of(found, namespace, name)
    except InvalidRequest as error:
        raise InvalidRequest(f"{label}: {error}", field=error.field, value=error.value) from None
    except (ValueError, TypeError, AttributeError) as error:
        raise InvalidRequest(f"{label}: spec does not read as a claim ({error})") from None


def pod_request(pod: Mapping[str, Any], lookup: Lookup) -> DraRequest | None:
    """The engine's request for a pod's vslice claims, or None when the pod names no claim or
    none of its claims asks vslice's devices (another driver's pod, or an extender pod).

    A claim the pod names and ``lookup`` does not find is kept in ``missing`` (the caller
    decides whether that is an error); one that does not read back is an InvalidRequest
    naming the claim and the field.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return None
    refs = claim_refs(spec)
    if not refs:
        return None
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name") or metadata.get("generateName") or "")
    made = generated_claims(pod)
    containers: list[ContainerRequest] = []
    types: list[str] = []
    excluded: list[str] = []
    found_notes: list[str] = []
    missing: list[ClaimRef] = []
    read: list[str] = []
    for ref in refs:
        found = None
        if ref.kind == "ResourceClaimTemplate" and ref.entry in made:
            found = lookup("ResourceClaim", namespace, made[ref.entry])
        if found is None:
            found = lookup(ref.kind, namespace, ref.name)
        if found is None:
            missing.append(ref)
            continue
        request, notes = _read_claim(found, ref.label(namespace), namespace, name)
        if not request.containers:
            continue
        read.append(f"{namespace}/{ref.name}")
        containers += request.containers
        types += request.gpu_types
        excluded += request.gpu_types_exclude
        found_notes += notes
    if not containers and not missing:
        return None
    return DraRequest(
        request=PodRequest(
            name=name,
            namespace=namespace,
            uid=str(metadata.get("uid") or ""),
            containers=containers,
            gpu_types=list(dict.fromkeys(types)),
            gpu_types_exclude=list(dict.fromkeys(excluded)),
        ),
        notes=tuple(found_notes),
        missing=tuple(missing),
        claims=tuple(read),
    )


def notes(pod: Mapping[str, Any], claim_notes: Iterable[str] = ()) -> list[str]:
    """What the vslice engine's answer for a DRA pod leaves out, one sentence each: the
    pod's vslice annotations DRA cannot express (:func:`vslice_core.dra.claims.unsupported`;
    type and UUID annotations, which only the claim's selectors can say), then what the
    claims ask that the plan cannot judge."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    said: list[str] = []
    try:
        asked = annotated_request({"metadata": {"annotations": annotations or {}}, "spec": {}})
    except InvalidRequest as error:
        said.append(f"{NOTE_PREFIX}the pod's vslice annotations are not read ({error})")
        asked = PodRequest()
    for note in claims.unsupported(asked):
        what, _, why = note.partition(" (")
        said.append(f"{NOTE_PREFIX}{what} is not applied" + (f" ({why}" if why else ""))
    filters = {
        "gpu-type": asked.gpu_types,
        "gpu-type-exclude": asked.gpu_types_exclude,
        "gpu-uuid": asked.gpu_uuids,
        "gpu-uuid-exclude": asked.gpu_uuids_exclude,
    }
    for key, values in filters.items():
        if values:
            said.append(
                f"{NOTE_PREFIX}annotation vslice.io/{key} ({', '.join(values)}) is not applied "
                "(a claim chooses GPUs by its CEL selectors; put the filter in the claim)"
            )
    said += [f"the plan leaves out: {note}" for note in claim_notes]
    return said


def plan_lines(dra_notes: Iterable[str]) -> list[str]:
    """The lines a DRA plan adds under the engine's answer (text form)."""
    return [PLACED_BY, *(f"  {note}" for note in dra_notes)]


def plan_json(dra_notes: Iterable[str]) -> dict[str, Any]:
    """The ``dra`` object ``vslice plan --json`` adds for a DRA pod."""
    return {"path": "dra", "driver": DRIVER, "placed_by": PLACED_BY, "notes": list(dra_notes)}


# --- manifests with several documents -----------------------------------------------------


def load_documents(text: str, what: str) -> list[Any]:
    """Every YAML (or JSON) document of ``text`` (empty ones dropped); a syntax error is an
    InvalidRequest naming ``what`` and the line."""
    return load_yaml_documents(text, what)


def split_documents(
    documents: list[Any], what: str
) -> tuple[Any, dict[tuple[str, str, str], Mapping[str, Any]]]:
    """The one workload among ``documents`` and the ResourceClaimTemplates and
    ResourceClaims beside it, keyed ``(kind, namespace, name)`` (one without a namespace
    takes the workload's, or ``default``). One document is the workload, whatever it is (the
    caller judges its kind)."""
    if len(documents) <= 1:
        return (documents[0] if documents else None), {}
    workloads = [
        d for d in documents if not (isinstance(d, Mapping) and d.get("kind") in CLAIM_KINDS)
    ]
    if len(workloads) != 1:
        found = [d.get("kind") if isinstance(d, Mapping) else type(d).__name__ for d in documents]
        raise InvalidRequest(
            f"{what} must hold one workload and, beside it, the ResourceClaimTemplates or "
            f"ResourceClaims it names; got {len(workloads)} other documents among "
            f"{len(documents)} ({', '.join(map(str, found))})",
            field=what,
            value=None,
        )
    workload = workloads[0]
    meta = workload.get("metadata") if isinstance(workload, Mapping) else None
    workload_ns = (meta or {}).get("namespace")
    extra: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for document in documents:
        if document is workload:
            continue
        found_meta = document.get("metadata")
        found_meta = found_meta if isinstance(found_meta, Mapping) else {}
        given = found_meta.get("namespace") or workload_ns
        namespace = str(given or "default")
        # Without a namespace on either, the document keeps none: the caller (a client with
        # its own namespace) puts it where it puts the workload.
        body = {**document, "metadata": {**found_meta, **({"namespace": given} if given else {})}}
        extra[(str(document["kind"]), namespace, str(found_meta.get("name")))] = body
    return workload, extra


def chain(*lookups: Lookup | Mapping[tuple[str, str, str], Mapping[str, Any]] | None) -> Lookup:
    """One lookup trying each in turn (a mapping keyed ``(kind, namespace, name)`` counts)."""

    def find(kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        for lookup in lookups:
            if lookup is None:
                continue
            if isinstance(lookup, Mapping):
                found = lookup.get((kind, namespace, name))
            else:
                found = lookup(kind, namespace, name)
            if found is not None:
                return found
        return None

    return find


# --- what the SDK creates for Slice(path="dra") ------------------------------------------
