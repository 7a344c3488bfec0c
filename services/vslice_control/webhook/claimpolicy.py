"""What the webhook decides for a ResourceClaim or ResourceClaimTemplate a user writes.

Claims that ask vslice's devices (a device class of ``gpu.vslice.io``) are checked with
``vslice_core.dra.claims.check``: a capacity vslice does not publish or outside its request
policy, a selector on an attribute vslice devices do not have, or a vslice device class that
does not exist would leave the pod pending with no word why (kube-scheduler only says no
device fits). They are refused at creation instead, the message listing every problem with
its field and value. Requests of other drivers' classes are not looked at.

An UPDATE is judged only when it changes the spec: in ``resource.k8s.io/v1`` the spec of
both kinds is immutable, so an UPDATE is a metadata change (a finalizer the scheduler or the
claim controller adds or removes), which must pass even for a claim created before the
webhook checked claims, or its deletion would hang.
"""

from __future__ import annotations

from typing import Any

from vslice_core.dra import DRIVER, claims

from vslice_control.webhook.review import ClaimAdmission, Verdict

CLAIM = "claim"
"""Reason code of an admitted claim or template (it is never patched)."""
CLAIM_REFUSED = "spec.devices.requests"
"""Reason code of a refused one: the field every problem lies under. The problems' own
fields name capacities the user wrote, which would let a claim mint metric label values."""


def review_claim(request: ClaimAdmission) -> Verdict:
    if request.operation not in ("CREATE", "UPDATE"):
        return Verdict(allowed=True, reason=CLAIM)
    if request.old_claim is not None and request.old_claim.get("spec") == request.claim.get("spec"):
        return Verdict(allowed=True, reason=CLAIM)
    problems = claims.check(_named(request))
    if not problems:
        return Verdict(allowed=True, reason=CLAIM)
    listed = "; ".join(str(problem) for problem in problems)
    return Verdict.deny(
        f"{request.kind} {request.namespace}/{request.name} asks {DRIVER} devices in a "
        f"way they cannot be given ({len(problems)} problem{'s' * (len(problems) > 1)}): "
        f"{listed}",
        code=400,
        reason=CLAIM_REFUSED,
    )


def _named(request: ClaimAdmission) -> dict[str, Any]:
    # A claim being created may carry only generateName, and its namespace only in the
    # request: the messages name it the way the request does.
    metadata = dict(request.claim.get("metadata") or {})
    metadata.update(namespace=request.namespace, name=request.name or "?")
    return {**request.claim, "metadata": metadata}
