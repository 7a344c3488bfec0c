"""What the API server sends to the webhook: the ``rules`` and ``matchConditions`` of its two
configurations, the pods' mutating one and the claims' validating one.

Pods
----

For a pod being created, the webhook (``policy.review_pod``) changes or refuses something only
when the pod

- has a container or init container whose ``resources.limits`` or ``resources.requests`` name
  one of vslice's resources (``ResourceNames.managed``), or a resource that starts with the GPU
  resource's name (``nvidia.com/gpumemory``: refused as unknown);
- carries one of vslice's state annotations (``vslice_core.annotations.POD_STATE``: removed,
  with a warning);
- has a container that sets ``NVIDIA_VISIBLE_DEVICES`` in ``env``, or an ``envFrom`` whose
  ``prefix`` and ``NVIDIA_VISIBLE`` start one another (refused for a container without GPUs
  unless the value is ``none`` or ``void``);
- does not set ``shareProcessNamespace: true`` and has two or more containers (init
  containers included) that reference claims (``claimsharing``: refused when two of them use
  one slice).

The expression below is true exactly for those pods (a little more for the environment: every
value of the variable and every such prefix, so the webhook decides). Every other pod, most CPU
pods, goes on without a call, and so is created even while the webhook is down; the pods above
still fail closed (``failurePolicy: Fail``). The expression tests every optional field with
``has()``, so a pod without init containers, resources, env or annotations never makes it fail
to evaluate (an evaluation error counts as a failed call, and would refuse the pod).

Claims
------

Users' ResourceClaims and ResourceClaimTemplates go through a validating configuration
(``claimpolicy.review_claim``), which sees each object after every mutating webhook has run,
so what it checks is what is stored. Its ``matchConditions`` keep every other claim off the
webhook, so claims of other drivers are created even while the webhook is down; all conditions
of the list must hold:

- the claim (or the template's claim) has a request, or a ``firstAvailable`` subrequest,
  whose ``deviceClassName`` is ``gpu.vslice.io`` or ends in ``.gpu.vslice.io``;
- it is a CREATE, or an UPDATE that changes the spec (the spec of both kinds is immutable in
  ``resource.k8s.io/v1``, so an UPDATE is the finalizer and label changes of kube-scheduler
  and the claim controller, which must never wait for the webhook or the claim's deletion
  would hang while it is down).

Claim allocations
-----------------

kube-scheduler allocates a claim by writing ``status.allocation`` (with the pod's reservation)
in one UPDATE of ``resourceclaims/status``; a second webhook of the claims' configuration sends
the webhook those writes (``claimquota.review_allocation``: the namespace's quota over every
allocated claim), and only those that newly allocate a ``gpu.vslice.io`` device: the old
object had no allocation and the new one has a result of that driver. Reservations of an
already allocated claim, releases and deallocations never wait for the webhook.

``vslice_control.install.admission`` wraps these in the configurations that the lab, the
Ansible role and ``vslice manifests`` install.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from vslice_core.annotations import POD_STATE
from vslice_core.dra import DRIVER
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice_control.webhook import claimsharing
from vslice_control.webhook.environment import VISIBLE_DEVICES

CONDITION_NAME = "asks-for-gpus-or-sets-what-vslice-checks"
CLAIM_CLASS_CONDITION = "asks-vslice-devices"
CLAIM_SPEC_CONDITION = "creates-or-changes-the-spec"
ALLOCATION_CONDITION = "newly-allocates-vslice-devices"
ALLOCATION_EXPRESSION = (
    "(oldObject == null || !has(oldObject.status) || !has(oldObject.status.allocation)) && "
    "has(object.status) && has(object.status.allocation) && "
    "has(object.status.allocation.devices) && has(object.status.allocation.devices.results) && "
    f"object.status.allocation.devices.results.exists(r, r.driver == '{DRIVER}')"
)
CLAIM_SPEC_EXPRESSION = (
    "request.operation == 'CREATE' || oldObject == null || object.spec != oldObject.spec"
)
VISIBLE_PREFIX = "NVIDIA_VISIBLE"
"""The ``envFrom`` prefix range the webhook refuses to a container without GPUs."""


def pod_rules() -> list[dict[str, Any]]:
    """The pods' configuration's ``rules``: pods being created."""
    return [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]


def match_conditions(names: ResourceNames = DEFAULT_RESOURCE_NAMES) -> list[dict[str, str]]:
    """The pods' ``matchConditions`` (one: all conditions of a list must hold)."""
    return [{"name": CONDITION_NAME, "expression": expression(names)}]


def expression(names: ResourceNames = DEFAULT_RESOURCE_NAMES) -> str:
    """CEL over ``object`` (the pod) that is true when the webhook has something to do."""
    container = f"{_asks_for_gpus(names)} || {_sets_gpu_environment()}"
    return " || ".join(
        [
            f"(has(object.spec.containers) && object.spec.containers.exists(c, {container}))",
            f"(has(object.spec.initContainers) && "
            f"object.spec.initContainers.exists(c, {container}))",
            f"(has(object.metadata.annotations) && "
            f"object.metadata.annotations.exists(k, k in {_cel_list(POD_STATE)}))",
            f"({claimsharing.expression()})",
        ]
    )


def _asks_for_gpus(names: ResourceNames) -> str:
    key = f"k in {_cel_list(names.managed())} || k.startsWith('{names.gpu}')"
    return (
        f"has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, {key})) "
        f"|| (has(c.resources.requests) && c.resources.requests.exists(k, {key})))"
    )


def _sets_gpu_environment() -> str:
    return (
        f"(has(c.env) && c.env.exists(e, e.name == '{VISIBLE_DEVICES}')) || "
        f"(has(c.envFrom) && c.envFrom.exists(e, has(e.prefix) && e.prefix != '' && "
        f"(e.prefix.startsWith('{VISIBLE_PREFIX}') || '{VISIBLE_PREFIX}'.startsWith(e.prefix))))"
    )


def _cel_list(items: Sequence[str]) -> str:
    return json.dumps(list(items)).replace('"', "'")


def claim_rules() -> list[dict[str, Any]]:
    """The claims' configuration's ``rules``: v1 ResourceClaims and ResourceClaimTemplates."""
    return [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["resourceclaims", "resourceclaimtemplates"],
            "scope": "Namespaced",
        }
    ]


def claim_match_conditions() -> list[dict[str, str]]:
    """The claims' ``matchConditions``: asks vslice's devices, and creates or changes the spec."""
    return [
        {"name": CLAIM_CLASS_CONDITION, "expression": claim_class_expression()},
        {"name": CLAIM_SPEC_CONDITION, "expression": CLAIM_SPEC_EXPRESSION},
    ]


def claim_class_expression() -> str:
    """CEL over ``object`` (a claim or a template) that is true when it asks vslice's devices."""
    return (
        f"(has(object.spec) && {_asks_vslice('object.spec')}) || "
        f"(has(object.spec) && has(object.spec.spec) && {_asks_vslice('object.spec.spec')})"
    )


def _asks_vslice(spec: str) -> str:
    exactly = (
        "(has(r.exactly) && has(r.exactly.deviceClassName) && "
        f"{_ours('r.exactly.deviceClassName')})"
    )
    first = (
        "(has(r.firstAvailable) && r.firstAvailable.exists(s, has(s.deviceClassName) && "
        f"{_ours('s.deviceClassName')}))"
    )
    return (
        f"(has({spec}.devices) && has({spec}.devices.requests) && "
        f"{spec}.devices.requests.exists(r, {exactly} || {first}))"
    )


def _ours(value: str) -> str:
    return f"({value} == '{DRIVER}' || {value}.endsWith('.{DRIVER}'))"


def allocation_rules() -> list[dict[str, Any]]:
    """The allocations' ``rules``: writes of v1 ResourceClaims' status."""
    return [
        {
            "operations": ["UPDATE"],
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["resourceclaims/status"],
            "scope": "Namespaced",
        }
    ]


def allocation_match_conditions() -> list[dict[str, str]]:
    """The allocations' ``matchConditions``: the write newly allocates a vslice device."""
    return [{"name": ALLOCATION_CONDITION, "expression": ALLOCATION_EXPRESSION}]
