"""Containers of one pod sharing a claim: refused unless they share one process namespace.

The shim holds a slice in the claim request's region, one accounting slot per process keyed by
its pid and checked with ``kill(pid, 0)``. Each container has its own pid namespace unless the
pod sets ``spec.shareProcessNamespace: true``: two containers on one slice would see each
other's slots as dead (or as their own pids) and each be held to the whole slice, so together
they could hold it twice over. So a pod is refused when two of its containers (init containers
included) reference one claim in ways that overlap, the same request or the whole claim, and
the pod does not share its process namespace; the message names the containers, the claim
and what works instead. Different requests of one claim are different slices (each has its own
region) and pass; so does every pod with ``shareProcessNamespace: true``, whose containers'
processes the shim counts in one namespace.

The rule does not ask which driver serves the claim: the pod names only its claim entries, and
a template or claim read at admission could be replaced, or be created after the pod. It costs
pods of other drivers that share a claim between containers the same choice (one request per
container, or a shared process namespace).

Pods between each other are the ValidatingAdmissionPolicy's concern
(``vslice_control.install.claimreservation``): a vslice claim is reserved for one pod.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vslice_core.dra import claims

from vslice_control.webhook.podspec import Container, containers

REASON = "spec.containers[].resources.claims"
"""Reason code of the refusal (the field, indices dropped)."""
WHOLE = None
"""A reference without ``request``: every request of the claim."""


@dataclass(frozen=True)
class ClaimUse:
    """One container's reference to a claim entry of the pod (``resources.claims[]``)."""

    container: str
    """Where the container sits: ``spec.containers[1]``."""
    name: str
    claim: str
    """The pod's claim entry (``spec.resourceClaims[].name``)."""
    request: str | None
    """The claim's request, or :data:`WHOLE`."""

    def overlaps(self, other: ClaimUse) -> bool:
        return self.claim == other.claim and (
            self.request is WHOLE or other.request is WHOLE or self.request == other.request
        )


def uses(items: Iterable[Container]) -> list[ClaimUse]:
    """Every claim reference of the containers, in their order."""
    found = []
    for item in items:
        resources = item.spec.get("resources")
        listed = resources.get("claims") if isinstance(resources, Mapping) else None
        for entry in listed if isinstance(listed, list) else []:
            if isinstance(entry, Mapping) and entry.get("name"):
                request = entry.get("request") or WHOLE
                found.append(ClaimUse(item.field, item.name, str(entry["name"]), request))
    return found


def converted(
    pod: Mapping[str, Any], gpu_containers: Collection[tuple[bool, str]]
) -> list[ClaimUse]:
    """The references the DRA conversion (``draconvert``) gives the GPU containers: each its
    own request of the claim ``vslice-gpu``. A container of the pod that already references
    that entry would share a slice with them once the claim is added."""
    return [
        ClaimUse(item.field, item.name, claims.CLAIM_NAME, claims.request_name(item.name))
        for item in containers(pod)
        if item.key in gpu_containers
    ]


def refusal(pod: Mapping[str, Any], added: Sequence[ClaimUse] = ()) -> str | None:
    """Why the pod is refused, or None. ``added``: references the webhook itself is about to
    give the pod (its DRA conversion), checked with the pod's own."""
    spec = pod.get("spec")
    if isinstance(spec, Mapping) and spec.get("shareProcessNamespace") is True:
        return None
    found = [*uses(containers(pod)), *added]
    for position, first in enumerate(found):
        for second in found[position + 1 :]:
            if first.container != second.container and first.overlaps(second):
                return _message(first, second)
    return None


def _message(first: ClaimUse, second: ClaimUse) -> str:
    what = (
        f"request {first.request!r} of claim {first.claim!r}"
        if first.request is not WHOLE and first.request == second.request
        else f"claim {first.claim!r}"
    )
    return (
        f"{first.container}.resources.claims and {second.container}.resources.claims: "
        f"containers {first.name!r} and {second.name!r} both use {what}, and each container "
        "has its own process namespace, in which a GPU slice's shim counts only its own "
        "processes (each would be held to the whole slice alone); give each container its "
        "own request of the claim (resources.claims[].request), or set "
        "spec.shareProcessNamespace: true so the slice counts the processes of all of them"
    )


def expression() -> str:
    """CEL over ``object`` (the pod) for the webhook's ``matchConditions``: true for a pod
    that does not share its process namespace and has two or more containers that reference
    claims, a superset of what :func:`refusal` refuses (the webhook compares the references)."""
    count = " + ".join(
        f"(has(object.spec.{kind}) ? size(object.spec.{kind}.filter(c, has(c.resources) && "
        "has(c.resources.claims) && size(c.resources.claims) > 0)) : 0)"
        for kind in ("containers", "initContainers")
    )
    return (
        "(!has(object.spec.shareProcessNamespace) || !object.spec.shareProcessNamespace) && "
        f"({count}) > 1"
    )
