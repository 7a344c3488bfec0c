"""A namespace's GPU quota on the DRA path: every allocated vslice claim counts, checked where
kube-scheduler writes the allocation.

kube-scheduler writes a claim's ``status.allocation`` together with the pod's reservation in
one UPDATE of ``resourceclaims/status`` before it binds the pod; a validating webhook rule
sends the webhook exactly those updates that newly give a claim a ``gpu.vslice.io`` device
(:mod:`vslice_control.webhook.reach`). There :func:`review_allocation` counts the claim the
way the extender counts a pod at bind time (:func:`vslice_control.quota.claims.claim_charge`)
and the :class:`~vslice_control.quota.claims.ClaimLedger` decides, under one lock, whether
what the namespace holds (its allocated claims and its extender-path pods) plus this claim
stays within the quota; a claim admitted is recorded in the same step, so of ten allocations
arriving at once only as many as fit get through, whatever the order. A refusal fails
kube-scheduler's PreBind: the pod stays pending with the message in its ``PodScheduled``
condition and ``FailedScheduling`` event, and kube-scheduler tries again (it fits once
something of the namespace is released).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vslice_core.dra import claim_label
from vslice_core.dra.allocations import shares
from vslice_core.errors import InvalidRequest
from vslice_core.model import QuotaLimits
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice_control.quota.claims import (
    ClaimLedger,
    Over,
    claim_charge,
    claim_uid,
    claim_version,
)
from vslice_control.webhook.review import ClaimAdmission, Verdict

QUOTA_EXCEEDED = "quota_exceeded"
"""Reason code of a refusal for quota (the pods' and the extender's code for the same)."""
NOT_COUNTED = "claims_not_listed"
"""Reason code of a refusal because the claims have not been listed yet."""
UNREADABLE = "status.allocation"
"""Reason code of an allocation the webhook cannot count."""
_UNITS = {
    "memory_mib": "MiB of GPU memory",
    "cores": "percent of a GPU's SMs",
    "gpus": "GPU slices",
}


def allocates(request: ClaimAdmission) -> bool:
    """Whether the request newly gives a ResourceClaim a vslice device: the UPDATE of
    ``resourceclaims/status`` kube-scheduler makes when it allocates (only a status write can
    set an allocation; the API server keeps the stored status on a write of the claim)."""
    if request.kind != "ResourceClaim" or request.operation != "UPDATE":
        return False
    try:
        before = shares(request.old_claim) if request.old_claim is not None else []
        after = shares(request.claim)
    except InvalidRequest:
        return bool(_results(request.claim)) and not _results(request.old_claim or {})
    return bool(after) and not before


def _results(claim: Mapping[str, Any]) -> object:
    status = claim.get("status")
    return (status.get("allocation") if isinstance(status, Mapping) else None) or None


def review_allocation(
    request: ClaimAdmission,
    ledger: ClaimLedger,
    limits: QuotaLimits | None,
    names: ResourceNames = DEFAULT_RESOURCE_NAMES,
) -> Verdict:
    """Admit the allocation when the namespace's claims with it stay within its quota."""
    claim = _named(request)
    try:
        charge = claim_charge(claim, ledger.cards)
    except InvalidRequest as error:
        return Verdict.deny(str(error), code=400, reason=UNREADABLE)
    if limits is not None and not ledger.synced:
        return Verdict.deny(
            f"ResourceClaim {claim_label(claim)}: namespace {request.namespace!r} has a GPU "
            "quota and the webhook has not listed its ResourceClaims and pods yet, so it cannot "
            "count what the namespace holds; kube-scheduler tries again",
            code=503,
            reason=NOT_COUNTED,
        )
    version = claim_version(request.old_claim or claim)
    over = ledger.admit(request.namespace, claim_uid(claim), charge, limits, version)
    if not over:
        return Verdict(allowed=True, reason="allocation")
    return Verdict.deny(over_message(claim, over[0], names), code=403, reason=QUOTA_EXCEEDED)


def over_message(claim: Mapping[str, Any], over: Over, names: ResourceNames) -> str:
    """The refusal: the claim, the field, the value, the limit and what fits now."""
    resource = {"memory_mib": names.memory, "cores": names.cores, "gpus": names.gpu}[over.field]
    unit = _UNITS[over.field]
    namespace = (claim.get("metadata") or {}).get("namespace", "?")
    left = max(0, over.limit - over.used)
    claims = over.used - over.pods
    held = f"the other claims of namespace {namespace!r} already hold {claims}"
    released = "claims are released (their pods end)"
    if over.pods:
        released = "claims or pods are released (their pods end)"
        if claims:
            held += f" and its pods on the extender path {over.pods}"
        else:
            held = (
                f"the pods of namespace {namespace!r} on the extender path already hold {over.pods}"
            )
    return (
        f"ResourceClaim {claim_label(claim)}: status.allocation.devices.results gives it "
        f"{over.asked} {unit}, and {held}: {over.asked + over.used} in all, more than its quota "
        f"allows (ResourceQuota requests.{resource} = {over.limit}); {left} fits now, more once "
        f"the namespace's other {released}"
    )


def _named(request: ClaimAdmission) -> dict[str, Any]:
    metadata = dict(request.claim.get("metadata") or {})
    metadata.update(namespace=request.namespace, name=request.name or metadata.get("name", "?"))
    return {**request.claim, "metadata": metadata}
