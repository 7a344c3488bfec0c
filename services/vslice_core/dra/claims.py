"""What a claim asks: vslice requests as ResourceClaim specs, and checks of claims users write.

A :class:`~vslice_core.model.PodRequest` (what the webhook reads from HAMi-style limits and
vslice annotations) becomes one ResourceClaimTemplate spec with one request per GPU container,
named after the container, so the same manifest means the same slice on either path:

- ``nvidia.com/gpu: n`` -> ``count: n``, with a ``distinctAttribute`` constraint on the UUID
  (a device that allows multiple allocations could otherwise be given twice to one request);
- ``gpumem`` (MiB) -> ``capacity.requests.memory`` in bytes; no memory asked -> the whole card;
  ``gpumem-percentage: 100`` -> the whole card; any other percentage cannot be said in DRA
  (capacity requests are absolute amounts) and is refused with the MiB it would be per model;
- ``gpucores`` -> ``capacity.requests.cores``;
- ``use-gputype`` / ``nouse-gputype`` / ``use-gpuuuid`` / ``nouse-gpuuuid`` -> CEL selectors on
  the ``model`` and ``uuid`` attributes (a type matches whole words of the model, as in the
  engine: :mod:`vslice_core.gputypes`); ``numa-bind`` with several GPUs -> a ``matchAttribute``
  constraint on ``numaNode``.

Node and GPU scheduling policies (binpack/spread/topology) and namespace quotas have no DRA
equivalent; :func:`unsupported` names them so ``vslice plan`` and the webhook can say so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vslice_core.dra import CORES, DEVICE_CLASS, DRIVER, MEMORY, MIB, SLOTS, claim_label
from vslice_core.errors import InvalidRequest
from vslice_core.gputypes import cel_pattern, wanted_of_pattern
from vslice_core.model import ContainerRequest, PodRequest
from vslice_core.quantities import parse_quantity

ATTRIBUTES = ("model", "uuid", "index", "numaNode", "healthy", "cordoned", "allocatable")
CLAIM_NAME = "vslice-gpu"
"""The pod's claim entry (``spec.resourceClaims[].name``) its GPU containers reference, in
pods the webhook converts and pods the SDK makes."""
TEMPLATE_PREFIX = "vslice-"
HASH_LENGTH = 12
CAPACITIES = (MEMORY, CORES, SLOTS)
_LABEL = re.compile(r"[^a-z0-9-]+")
_ATTRS = f'device.attributes["{DRIVER}"]'


def request_name(container: str) -> str:
    """A claim request's name for a container: a DNS label (at most 63 characters)."""
    name = _LABEL.sub("-", container.lower()).strip("-")[:63].strip("-")
    return name or "gpu"


def _quoted(text: str) -> str:
    # A CEL string literal: JSON's escaping is valid CEL for the characters it escapes.
    return json.dumps(text)


def _model_matches(wanted: str) -> str:
    return f"{_ATTRS}.model.lowerAscii().matches({_quoted(cel_pattern(wanted))})"


def selectors(request: PodRequest) -> list[dict[str, Any]]:
    """CEL selectors for the pod's GPU type and UUID filters (same meaning as the engine's:
    a type matches whole words of the model, :mod:`vslice_core.gputypes`; UUIDs match
    exactly)."""
    attrs = _ATTRS
    found = []
    if request.gpu_types:
        found.append(" || ".join(_model_matches(t) for t in request.gpu_types))
    for kind in request.gpu_types_exclude:
        found.append(f"!{_model_matches(kind)}")
    if request.gpu_uuids:
        found.append(f"{attrs}.uuid in [{', '.join(_quoted(u) for u in request.gpu_uuids)}]")
    if request.gpu_uuids_exclude:
        listed = ", ".join(_quoted(u) for u in request.gpu_uuids_exclude)
        found.append(f"!({attrs}.uuid in [{listed}])")
    return [{"cel": {"expression": expression}} for expression in found]


def _capacity(container: ContainerRequest, field: str) -> dict[str, str]:
    asked: dict[str, str] = {}
    if container.memory_mib is not None:
        asked[MEMORY] = f"{container.memory_mib}Mi"
    elif container.memory_percent != 100:
        raise InvalidRequest(
            f"{field}: gpumem-percentage {container.memory_percent} cannot be asked on the DRA "
            "path (a claim asks an absolute amount of memory); ask nvidia.com/gpumem in MiB, "
            "or 100 percent for the whole card, or use the extender path",
            field=field,
            value=container.memory_percent,
        )
    if container.cores:
        asked[CORES] = str(container.cores)
    return asked


def claim_spec(request: PodRequest) -> dict[str, Any]:
    """The ResourceClaim spec (``spec`` of a ResourceClaimTemplate's ``spec``) for a pod."""
    requests = []
    constraints: list[dict[str, Any]] = []
    chosen = selectors(request)
    for container in request.containers:
        name = request_name(container.name)
        exactly: dict[str, Any] = {
            "deviceClassName": DEVICE_CLASS,
            "allocationMode": "ExactCount",
            "count": container.gpus,
        }
        if chosen:
            exactly["selectors"] = chosen
        capacity = _capacity(container, f"containers[{container.name}]")
        if capacity:
            exactly["capacity"] = {"requests": capacity}
        requests.append({"name": name, "exactly": exactly})
        if container.gpus > 1:
            constraints.append({"requests": [name], "distinctAttribute": f"{DRIVER}/uuid"})
            if request.numa_bind:
                constraints.append({"requests": [name], "matchAttribute": f"{DRIVER}/numaNode"})
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def template_name(spec: Mapping[str, Any]) -> str:
    """``vslice-`` and a short hash of the claim spec: the same shape, the same name, so the
    webhook and the SDK share one template per slice shape in a namespace."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return TEMPLATE_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def claim_template(
    spec: Mapping[str, Any], namespace: str | None = None, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The ResourceClaimTemplate holding a claim spec (:func:`claim_spec`), named by it."""
    metadata: dict[str, Any] = {"name": template_name(spec), "labels": dict(labels or {})}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": {"spec": json.loads(json.dumps(spec))},
    }


def unsupported(request: PodRequest) -> list[str]:
    """What the pod asks that DRA's allocator does not do, in words (empty: nothing)."""
    notes = []
    if request.node_policy != "binpack":
        notes.append(f"node policy {request.node_policy!r} (DRA picks nodes its own way)")
    if request.gpu_policy not in ("spread",):
        notes.append(f"GPU policy {request.gpu_policy!r} (DRA takes the first device that fits)")
    if request.numa_bind and all(c.gpus == 1 for c in request.containers):
        notes.append("numa-bind with one GPU (nothing to align on DRA)")
    return notes


def _check_capacity(label: str, field: str, requests: Mapping[str, Any]) -> list[InvalidRequest]:
    problems = []
    for name, value in requests.items():
        where = f"{field}.{name}"
        short = name.removeprefix(f"{DRIVER}/")
        if short not in CAPACITIES:
            problems.append(
                InvalidRequest(
                    f"{label}: {where} is not a capacity of {DRIVER} "
                    f"(it has {', '.join(CAPACITIES)}), got {value!r}",
                    field=where,
                    value=value,
                )
            )
            continue
        try:
            number = parse_quantity(value, where)
        except InvalidRequest as error:
            problems.append(InvalidRequest(f"{label}: {error}", field=where, value=value))
            continue
        expectation = None
        if short == MEMORY and (number < MIB or (number / MIB).denominator != 1):
            expectation = "a whole number of MiB, at least 1Mi (for example 8Gi or 8192Mi)"
        elif short == CORES and not (0 <= number <= 100 and number.denominator == 1):
            expectation = "a whole percent of the GPU's SMs, 0..100"
        elif short == SLOTS and number != 1:
            expectation = "1 (every claim takes one slice slot)"
        if expectation:
            problems.append(
                InvalidRequest(
                    f"{label}: {where} must be {expectation}, got {value!r}",
                    field=where,
                    value=value,
                )
            )
    return problems


_ATTRIBUTE_USE = re.compile(r'device\.attributes\["' + re.escape(DRIVER) + r'"\]\.(\w+)')
_CAPACITY_USE = re.compile(r'device\.capacity\["' + re.escape(DRIVER) + r'"\]\.(\w+)')


def _check_selectors(label: str, field: str, items: object) -> list[InvalidRequest]:
    problems = []
    for i, selector in enumerate(items if isinstance(items, list) else []):
        expression = ((selector or {}).get("cel") or {}).get("expression", "")
        if not isinstance(expression, str):
            continue
        for used, known, kind in (
            (_ATTRIBUTE_USE.findall(expression), ATTRIBUTES, "attribute"),
            (_CAPACITY_USE.findall(expression), CAPACITIES, "capacity"),
        ):
            for name in used:
                if name not in known:
                    where = f"{field}[{i}].cel.expression"
                    problems.append(
                        InvalidRequest(
                            f"{label}: {where} uses {kind} {name!r}, which "
                            f"{DRIVER} devices do not have (they have {', '.join(known)})",
                            field=where,
                            value=name,
                        )
                    )
    return problems


def check(
    claim: Mapping[str, Any], known_classes: Sequence[str] = (DEVICE_CLASS,)
) -> list[InvalidRequest]:
    """Problems of a claim (or a template's claim ``spec``) that asks vslice's devices.

    Requests naming another driver's class are not vslice's to judge; a class of vslice's
    domain that does not exist, a capacity vslice does not publish or outside its request
    policy, and a selector on an attribute vslice does not publish are each one problem
    naming the claim, the field and the value.
    """
    label = f"{claim.get('kind') or 'ResourceClaim'} {claim_label(claim)}"
    spec = claim.get("spec") or {}
    if "spec" in spec and "devices" not in spec:  # a ResourceClaimTemplate
        spec = spec.get("spec") or {}
    requests = ((spec.get("devices") or {}).get("requests")) or []
    problems: list[InvalidRequest] = []
    for i, request in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(request, Mapping):
            continue
        name = request.get("name", i)
        choices = [("exactly", request["exactly"])] if request.get("exactly") else []
        choices += [
            (f"firstAvailable[{j}]", sub)
            for j, sub in enumerate(request.get("firstAvailable") or [])
            if isinstance(sub, Mapping)
        ]
        for part, wanted in choices:
            field = f"spec.devices.requests[{name}].{part}"
            klass = wanted.get("deviceClassName")
            if not isinstance(klass, str) or not _ours(klass):
                continue
            if klass not in known_classes:
                problems.append(
                    InvalidRequest(
                        f"{label}: {field}.deviceClassName names no device class "
                        f"of {DRIVER} (there is {', '.join(known_classes)}), got {klass!r}",
                        field=f"{field}.deviceClassName",
                        value=klass,
                    )
                )
                continue
            asked = (wanted.get("capacity") or {}).get("requests") or {}
            if isinstance(asked, Mapping):
                problems += _check_capacity(label, f"{field}.capacity.requests", asked)
            problems += _check_selectors(label, f"{field}.selectors", wanted.get("selectors"))
    return problems


def _ours(klass: str) -> bool:
    return klass == DRIVER or klass.endswith("." + DRIVER)


_MODEL_MATCHES = re.compile(
    r'^device\.attributes\["'
    + re.escape(DRIVER)
    + r'"\]\.model\.lowerAscii\(\)\.matches\(("(?:[^"\\]|\\.)*")\)$'
)


def _type_filters(expression: str) -> tuple[list[str], list[str]] | None:
    """The type filters of a selector as :func:`selectors` writes them, or None for any
    other expression (the engine cannot judge arbitrary CEL)."""
    parts = [part.strip() for part in expression.split("||")]
    wanted = []
    for part in parts:
        negated = part.startswith("!")
        found = _MODEL_MATCHES.match(part.removeprefix("!"))
        if found is None or (negated and len(parts) > 1):
            return None
        text = wanted_of_pattern(json.loads(found.group(1)))
        if text is None:
            return None
        if negated:
            return [], [text]
        wanted.append(text)
    return wanted, []


def request_of(
    claim: Mapping[str, Any], namespace: str = "default", name: str = ""
) -> tuple[PodRequest, list[str]]:
    """A claim (or a template's claim ``spec``) read back as the engine's request, so
    ``vslice plan`` can answer for DRA pods with the same reasons; plus notes on what it asks
    that the engine cannot judge (a selector it does not recognise, an allocation mode other
    than ExactCount), which the plan then says it left out."""
    spec = claim.get("spec") or {}
    if "spec" in spec and "devices" not in spec:
        spec = spec.get("spec") or {}
    containers = []
    notes: list[str] = []
    types: list[str] = []
    excluded: list[str] = []
    for request in (spec.get("devices") or {}).get("requests") or []:
        exactly = request.get("exactly") if isinstance(request, Mapping) else None
        if not isinstance(exactly, Mapping) or exactly.get("deviceClassName") != DEVICE_CLASS:
            continue
        label = str(request.get("name", "?"))
        if exactly.get("allocationMode", "ExactCount") != "ExactCount":
            notes.append(
                f"request {label}: allocationMode {exactly.get('allocationMode')} "
                "is judged as one GPU"
            )
        asked = (exactly.get("capacity") or {}).get("requests") or {}
        memory = asked.get(MEMORY)
        cores = asked.get(CORES)
        mib = None if memory is None else -(-parse_quantity(memory, MEMORY) // MIB)
        containers.append(
            ContainerRequest(
                name=label,
                gpus=int(exactly.get("count") or 1),
                memory_mib=None if mib is None else int(mib),
                memory_percent=100 if mib is None else None,
                cores=0 if cores is None else int(parse_quantity(cores, CORES)),
            )
        )
        for selector in exactly.get("selectors") or []:
            expression = ((selector or {}).get("cel") or {}).get("expression", "")
            filters = _type_filters(str(expression))
            if filters is None:
                notes.append(f"request {label}: selector {expression!r} is not judged by the plan")
                continue
            types += filters[0]
            excluded += filters[1]
    return (
        PodRequest(
            name=name,
            namespace=namespace,
            containers=containers,
            gpu_types=types,
            gpu_types_exclude=excluded,
            gpu_policy="spread",
        ),
        notes,
    )
