"""vslice's resource values exactly as the API server would accept them, before normalization.

The core's quantity parser is lenient for plan files (it trims blanks, and Python's ``\\d``
matches any Unicode digit). At admission the webhook holds the pod to the API server's own
grammar, ASCII only, so what it accounts for is what Kubernetes stores: a value like ``"٣٠٠٠"``
or ``"3000 "`` is refused naming the field and the value. Also refused: ``requests`` that
differ from ``limits`` for a vslice resource (the API server refuses that for extended
resources, and the scheduler and the device plugin would otherwise disagree about the slice),
and values beyond what the node side can represent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction

from vslice_core.errors import InvalidRequest
from vslice_core.quantities import parse_quantity
from vslice_core.resources import ResourceNames

from vslice_control.webhook.podspec import Container

# Kubernetes' quantity grammar (k8s.io/apimachinery resource.Quantity), ASCII digits only.
_QUANTITY = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?",
    re.ASCII,
)
# The shim keeps a limit in bytes in a signed 64-bit integer: MiB * 2**20 must fit.
MAX_MEMORY_MIB = (2**63 - 1) >> 20
# The kubelet asks the device plugin for devices with an int32 count.
MAX_GPUS = 2**31 - 1


def refusal(items: list[Container], names: ResourceNames) -> str | None:
    """Why a vslice resource value of the pod is refused, or None."""
    managed = (*names.managed(), names.priority)
    for container in items:
        resources = container.spec.get("resources")
        if not isinstance(resources, Mapping):
            continue
        sections = {part: resources.get(part) for part in ("limits", "requests")}
        for part, section in sections.items():
            if not isinstance(section, Mapping):
                continue
            for resource in managed:
                if resource in section:
                    where = f"{container.field}.resources.{part}[{resource!r}]"
                    why = _value(where, section[resource], resource, names)
                    if why is not None:
                        return why
        why = _requests_match(container, sections, managed)
        if why is not None:
            return why
    return None


def _value(where: str, value: object, resource: str, names: ResourceNames) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"{where} must be a quantity string such as '3000', got {value!r}"
    if isinstance(value, str) and _QUANTITY.fullmatch(value) is None:
        return (
            f"{where} must be a Kubernetes quantity written with ASCII digits and no blanks "
            f"(e.g. '30720' or '4Gi'), got {value!r}"
        )
    try:
        number = parse_quantity(value, where)
    except InvalidRequest as exc:
        return str(exc)
    bound = {names.memory: MAX_MEMORY_MIB, names.gpu: MAX_GPUS}.get(resource)
    # Binary units are bytes; compare in MiB like the core does.
    if resource == names.memory and isinstance(value, str) and "i" in value:
        number = number / 2**20
    if bound is not None and number > bound:
        return f"{where} must be at most {bound}, got {value!r}"
    return None


def _requests_match(
    container: Container, sections: Mapping[str, object], managed: tuple[str, ...]
) -> str | None:
    limits, requests = sections["limits"], sections["requests"]
    if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
        return None
    for resource in managed:
        both = resource in limits and resource in requests
        if both and _number(requests[resource]) != _number(limits[resource]):
            return (
                f"{container.field}.resources.requests[{resource!r}] must equal "
                f"limits ({limits[resource]!r}) for a GPU resource, got "
                f"{requests[resource]!r}: set the value once, under limits"
            )
    return None


def _number(value: object) -> Fraction | None:
    try:
        return parse_quantity(value, "value")
    except InvalidRequest:
        return None
