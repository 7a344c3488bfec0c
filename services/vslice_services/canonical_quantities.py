"""GPU memory numbers as the API server hands them back: ``8000`` comes back as ``"8k"``.

The API server stores every quantity in its canonical form, so a pod written with
``nvidia.com/gpumem: 8000`` (MiB, HAMi's convention) reads back as ``"8k"``, and a
ResourceQuota ``hard`` of ``60000`` as ``"60k"``. Read with the rule "a unit means bytes",
those would be 8000 and 60000 *bytes*. The rule here: binary units (``Ki``, ``Mi``, ``Gi``...)
are bytes; a plain number, a decimal unit (``k``, ``M``, ``G``...) or an exponent is a count
of MiB, which is what the canonical form of a plain number always uses.

:func:`plain_memory` rewrites a pod's GPU-memory values into plain numbers before the core's
normalization reads them, :func:`memory_mib` reads one value (e.g. a quota's).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from vslice_core.quantities import parse_quantity, to_count, to_mib
from vslice_core.resources import ResourceNames

_COUNT_FORM = re.compile(r"^\+?\d+(?:\.\d*)?(?:[kMGTPE]|[eE][+-]?\d{1,3})$")


def memory_mib(value: object, field: str) -> int:
    """GPU memory in MiB: binary units are bytes, anything else counts MiB."""
    if isinstance(value, str) and _COUNT_FORM.match(value.strip()):
        return to_count(value, field)
    return to_mib(value, field)


def plain_memory(pod: Mapping[str, Any], names: ResourceNames) -> Mapping[str, Any]:
    """The pod, with canonical-form GPU-memory values turned back into plain MiB numbers.

    Returns the pod itself when nothing needs rewriting; values that are not valid quantities
    are left for the normalization to reject with its own message.
    """
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping) or not _has_count_form(spec, names.memory):
        return pod
    copied: dict[str, Any] = copy.deepcopy(dict(pod))
    for kind in ("initContainers", "containers"):
        for container in copied["spec"].get(kind) or []:
            for section in _sections(container):
                value = section.get(names.memory)
                if isinstance(value, str) and _COUNT_FORM.match(value.strip()):
                    number = parse_quantity(value, names.memory)
                    if number.denominator == 1:
                        section[names.memory] = str(int(number))
    return copied


def _sections(container: Any) -> list[dict[str, Any]]:
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return []
    return [s for s in (resources.get("limits"), resources.get("requests")) if isinstance(s, dict)]


def _has_count_form(spec: Mapping[str, Any], resource: str) -> bool:
    for kind in ("initContainers", "containers"):
        items = spec.get(kind)
        for container in items if isinstance(items, list) else []:
            for section in _sections(container):
                value = section.get(resource)
                if isinstance(value, str) and _COUNT_FORM.match(value.strip()):
                    return True
    return False
