"""What the webhook decides for a ResourceClaim or ResourceClaimTemplate a user writes.

Claims that ask vslice's devices (a device class of ``gpu.vslice.io``) are checked with
``vslice_core.dra.claims.check``: a capacity vslice does not publish or outside its request
policy, a selector on an attribute vslice devices do not have, or a vslice device class that
does not exist would leave the pod pending with no word why (kube-scheduler only says no
device fits). They are refused at creation instead, the message listing every problem with
its field and value. Requests of other drivers' classes are not looked at.

Then what the claim asks is held against what exists and what the namespace may use
(:func:`size_problems`), so a claim that can never be allocated is refused at creation with
the numbers rather than left pending:

- a memory request beyond the largest card the cluster's vslice ResourceSlices list;
- a claim that alone asks more than the namespace's GPU quota. It counts what the claim takes
  at least: ``count`` devices of each request (one for ``allocationMode: All``), the smallest
  alternative of a ``firstAvailable`` list, and for a request without a memory request the
  whole card it will get, at least the smallest card listed. What the namespace already holds
  is counted where the allocation is written (:mod:`vslice_control.webhook.claimquota`).

An UPDATE is judged only when it changes the spec: in ``resource.k8s.io/v1`` the spec of
both kinds is immutable, so an UPDATE is a metadata change (a finalizer the scheduler or the
claim controller adds or removes), which must pass even for a claim created before the
webhook checked claims, or its deletion would hang.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from vslice_core.dra import CORES, DRIVER, MEMORY, MIB, claim_label, claims
from vslice_core.model import QuotaLimits, QuotaUsage
from vslice_core.quantities import parse_quantity
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice_control.quota.limits import exceeded
from vslice_control.webhook.review import ClaimAdmission, Verdict

CLAIM = "claim"
"""Reason code of an admitted claim or template (it is never patched)."""
CLAIM_REFUSED = "spec.devices.requests"
"""Reason code of a refused one: the field every problem lies under. The problems' own
fields name capacities the user wrote, which would let a claim mint metric label values."""
QUOTA_EXCEEDED = "quota_exceeded"
"""Reason code of a claim that alone asks more than its namespace's quota."""
Cards = tuple[int, int]
"""The smallest and the largest card (MiB) of the cluster's vslice ResourceSlices."""


def review_claim(
    request: ClaimAdmission,
    quota: QuotaLimits | None = None,
    cards: Cards | None = None,
    names: ResourceNames = DEFAULT_RESOURCE_NAMES,
) -> Verdict:
    if request.operation not in ("CREATE", "UPDATE"):
        return Verdict(allowed=True, reason=CLAIM)
    if request.old_claim is not None and request.old_claim.get("spec") == request.claim.get("spec"):
        return Verdict(allowed=True, reason=CLAIM)
    claim = _named(request)
    problems = [str(problem) for problem in claims.check(claim)]
    if not problems:
        problems, over_quota = size_problems(claim, cards, quota, names)
        if over_quota and not problems:
            return Verdict.deny(over_quota, code=403, reason=QUOTA_EXCEEDED)
    if not problems:
        return Verdict(allowed=True, reason=CLAIM)
    return Verdict.deny(
        f"{request.kind} {request.namespace}/{request.name} asks {DRIVER} devices in a "
        f"way they cannot be given ({len(problems)} problem{'s' * (len(problems) > 1)}): "
        f"{'; '.join(problems)}",
        code=400,
        reason=CLAIM_REFUSED,
    )


def _named(request: ClaimAdmission) -> dict[str, Any]:
    # A claim being created may carry only generateName, and its namespace only in the
    # request: the messages name it the way the request does.
    metadata = dict(request.claim.get("metadata") or {})
    metadata.update(namespace=request.namespace, name=request.name or "?")
    return {**request.claim, "metadata": metadata}


@dataclass(frozen=True)
class _Choice:
    """One way a request can be met: ``exactly``, or one ``firstAvailable`` subrequest."""

    field: str
    count: int
    memory_mib: int | None
    cores: int


def size_problems(
    claim: Mapping[str, Any],
    cards: Cards | None,
    quota: QuotaLimits | None,
    names: ResourceNames = DEFAULT_RESOURCE_NAMES,
) -> tuple[list[str], str | None]:
    """Requests no card can meet, and the refusal when the claim alone exceeds the quota.

    ``claim`` has passed ``claims.check`` (its quantities read)."""
    label = f"{claim.get('kind') or 'ResourceClaim'} {claim_label(claim)}"
    problems: list[str] = []
    least = [0, 0, 0]
    whole_card = False
    for choices in _requests(claim):
        if cards is not None:
            problems += _beyond_every_card(label, choices, cards[1])
        smallest = cards[0] if cards is not None else 0
        asks = [
            (c.count * (smallest if c.memory_mib is None else c.memory_mib), c.count * c.cores)
            for c in choices
        ]
        least[0] += min(a[0] for a in asks)
        least[1] += min(a[1] for a in asks)
        least[2] += min(c.count for c in choices)
        whole_card |= any(c.memory_mib is None for c in choices) and cards is not None
    if quota is None:
        return problems, None
    totals = QuotaUsage(memory_mib=least[0], cores=least[1], gpus=least[2])
    over = exceeded(totals, quota)
    if not over:
        return problems, None
    return problems, _quota_message(label, claim, over[0], whole_card, cards, names)


def _beyond_every_card(label: str, choices: list[_Choice], largest: int) -> list[str]:
    beyond = [c for c in choices if c.memory_mib is not None and c.memory_mib > largest]
    if len(beyond) < len(choices):
        return []  # another alternative fits a card
    return [
        f"{label}: {c.field}.capacity.requests.{MEMORY} is {c.memory_mib}Mi, more than any "
        f"{DRIVER} device has (the largest card the cluster's ResourceSlices list has "
        f"{largest} MiB); ask at most {largest}Mi"
        for c in beyond
    ]


def _quota_message(
    label: str,
    claim: Mapping[str, Any],
    over: tuple[str, int, int],
    whole_card: bool,
    cards: Cards | None,
    names: ResourceNames,
) -> str:
    dimension, asked, limit = over
    namespace = (claim.get("metadata") or {}).get("namespace", "?")
    resource, what, ask = {
        "memory_mib": (names.memory, "MiB of GPU memory", f"{limit}Mi in capacity.requests.memory"),
        "cores": (names.cores, "percent of a GPU's SMs", f"{limit} in capacity.requests.cores"),
        "gpus": (names.gpu, "GPU slices", f"{limit} devices in all (count)"),
    }[dimension]
    why = ""
    if dimension == "memory_mib" and whole_card and cards is not None:
        why = (
            f" (a request without capacity.requests.{MEMORY} takes a whole card, and the "
            f"smallest the cluster lists has {cards[0]} MiB)"
        )
    return (
        f"{label}: spec.devices.requests ask at least {asked} {what}{why}, more than namespace "
        f"{namespace!r} may use (ResourceQuota requests.{resource} = {limit}); ask at most {ask}"
    )


def _requests(claim: Mapping[str, Any]) -> Iterator[list[_Choice]]:
    """Per request of vslice's device class, the ways it can be met."""
    spec = claim.get("spec") or {}
    if "spec" in spec and "devices" not in spec:  # a ResourceClaimTemplate
        spec = spec.get("spec") or {}
    for i, request in enumerate((spec.get("devices") or {}).get("requests") or []):
        name = request.get("name", i)
        parts = [("exactly", request.get("exactly"))] if request.get("exactly") else []
        parts += [
            (f"firstAvailable[{j}]", s) for j, s in enumerate(request.get("firstAvailable") or [])
        ]
        choices = [
            _choice(f"spec.devices.requests[{name}].{part}", wanted)
            for part, wanted in parts
            if isinstance(wanted, Mapping) and _ours(wanted.get("deviceClassName"))
        ]
        if choices and len(choices) == len(parts):  # another driver's alternative: not ours
            yield choices


def _choice(field: str, wanted: Mapping[str, Any]) -> _Choice:
    asked = (wanted.get("capacity") or {}).get("requests") or {}
    memory = asked.get(MEMORY, asked.get(f"{DRIVER}/{MEMORY}"))
    cores = asked.get(CORES, asked.get(f"{DRIVER}/{CORES}"))
    exact = wanted.get("allocationMode", "ExactCount") == "ExactCount"
    return _Choice(
        field=field,
        count=int(wanted.get("count") or 1) if exact else 1,
        memory_mib=None if memory is None else int(-(-parse_quantity(memory, MEMORY) // MIB)),
        cores=0 if cores is None else int(parse_quantity(cores, CORES)),
    )


def _ours(klass: object) -> bool:
    return isinstance(klass, str) and (klass == DRIVER or klass.endswith("." + DRIVER))
