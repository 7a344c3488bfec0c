"""Which pods the API server sends to the webhook: the ``matchConditions`` of its configuration.

For a pod being created, the webhook (``policy.review_pod``) changes or refuses something only
when the pod

- has a container or init container whose ``resources.limits`` or ``resources.requests`` name
  one of vslice's resources (``ResourceNames.managed``), or a resource that starts with the GPU
  resource's name (``nvidia.com/gpumemory``: refused as unknown);
- carries one of vslice's state annotations (``vslice_core.annotations.POD_STATE``: removed,
  with a warning);
- has a container that sets ``NVIDIA_VISIBLE_DEVICES`` in ``env``, or an ``envFrom`` whose
  ``prefix`` and ``NVIDIA_VISIBLE`` start one another (refused for a container without GPUs
  unless the value is ``none`` or ``void``).

The expression below is true exactly for those pods (a little more for the environment: every
value of the variable and every such prefix, so the webhook decides). Every other pod, most CPU
pods, goes on without a call, and so is created even while the webhook is down; the pods above
still fail closed (``failurePolicy: Fail``). The expression tests every optional field with
``has()``, so a pod without init containers, resources, env or annotations never makes it fail
to evaluate (an evaluation error counts as a failed call, and would refuse the pod).

The lab and the Ansible role render the same conditions; the role's template is checked against
this module by its tests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from vslice_core.annotations import POD_STATE
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice_control.webhook.environment import VISIBLE_DEVICES

CONDITION_NAME = "asks-for-gpus-or-sets-what-vslice-checks"
VISIBLE_PREFIX = "NVIDIA_VISIBLE"
"""The ``envFrom`` prefix range the webhook refuses to a container without GPUs."""


def match_conditions(names: ResourceNames = DEFAULT_RESOURCE_NAMES) -> list[dict[str, str]]:
    """The webhook's ``matchConditions`` (one: all conditions of a list must hold)."""
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
