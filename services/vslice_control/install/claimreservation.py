"""The ValidatingAdmissionPolicy that lets a vslice ResourceClaim serve one pod.

A slice is enforced by the shim in the containers that use it, and the shim counts what they
hold in the claim's region, one slot per process keyed by its pid and checked with
``kill(pid, 0)``. A pid means something only inside one pid namespace, and every pod has its
own: two pods reserving one claim would each see the other's slots as dead and each be held to
the whole claim, so together they would hold the claim's size once per pod, taken from the
other claims on the card. So a claim whose devices are vslice's is reserved for one pod only.

Who reserves a claim for a pod: kube-scheduler, by adding the pod to ``status.reservedFor`` in
an UPDATE of the ``resourceclaims/status`` subresource before it binds the pod (and the claim
controller the same way for a pod that names its node). This policy (CEL evaluated inside the
API server on that very write, so two schedulers racing cannot both get through) refuses a
status write that makes ``reservedFor`` longer when the claim is allocated vslice devices and
the result would be more than one consumer, or a consumer that is not a pod (a PodGroup
reservation stands for many pods). The second pod stays pending, its event and condition
carry the message, and kube-scheduler tries again once the first pod has released the claim.
Writes that shorten the list (pods ending) always pass. Nobody is exempt: vslice's services
never write ``reservedFor``.

A ResourceClaimTemplate gives each pod a claim of its own, which is what the webhook's DRA
path and the SDK use.
"""

from __future__ import annotations

from typing import Any

from vslice_core.dra import DRIVER

from vslice_control.install import statepolicy
from vslice_control.install.statepolicy import admission_policy
from vslice_control.install.values import InstallValues

POLICY_NAME = "vslice-claim-serves-one-pod"

ALLOCATED_VSLICE = (
    "has(object.status) && has(object.status.allocation) && "
    "has(object.status.allocation.devices) && has(object.status.allocation.devices.results) && "
    f"object.status.allocation.devices.results.exists(r, r.driver == '{DRIVER}')"
)
"""CEL: the claim is allocated at least one device of vslice's driver."""
RESERVED = (
    "has(object.status) && has(object.status.reservedFor) ? size(object.status.reservedFor) : 0"
)
RESERVED_BEFORE = (
    "oldObject != null && has(oldObject.status) && has(oldObject.status.reservedFor) ? "
    "size(oldObject.status.reservedFor) : 0"
)
ONE_POD = (
    "variables.reserved == 1 && object.status.reservedFor.all(c, c.resource == 'pods' && "
    "(!has(c.apiGroup) || c.apiGroup == ''))"
)
"""CEL: the claim is reserved for exactly one consumer, a pod."""
EXPRESSION = f"!variables.vslice || variables.reserved <= variables.before || ({ONE_POD})"
MESSAGE = (
    "'ResourceClaim ' + object.metadata.namespace + '/' + object.metadata.name + "
    f"' holds a {DRIVER} GPU slice and serves one pod only: "
    "its slice is enforced per pod, so two pods on it would each get the whole slice; give "
    "each pod its own claim (spec.resourceClaims[].resourceClaimTemplateName with a "
    "ResourceClaimTemplate), or put the containers that share the slice in one pod'"
)


def objects(values: InstallValues) -> list[dict[str, Any]]:
    """The policy, then its binding. Installed on every cluster: where no claim is ever
    allocated vslice's devices the policy never refuses anything."""
    return [policy(), statepolicy.binding(POLICY_NAME)]


def policy() -> dict[str, Any]:
    return admission_policy(
        POLICY_NAME,
        {
            "matchConstraints": {
                # Equivalent: a write through an older resource.k8s.io version is converted
                # to v1 and checked too, with the v1 field names the expressions use.
                "matchPolicy": "Equivalent",
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["resourceclaims/status"],
                    }
                ],
            },
            "variables": [
                {"name": "vslice", "expression": ALLOCATED_VSLICE},
                {"name": "reserved", "expression": RESERVED},
                {"name": "before", "expression": RESERVED_BEFORE},
            ],
            "validations": [
                {"expression": EXPRESSION, "reason": "Forbidden", "messageExpression": MESSAGE}
            ],
        },
    )
