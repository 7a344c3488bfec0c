"""From a Pod manifest to a normalized :class:`PodRequest`: the webhook's rules, in one place.

One pass reads every vslice value of every container and init container, under ``limits``
and ``requests`` (the GPU resources and ``nvidia.com/priority``), each exactly once, before
any rule below applies; in order, per container, it refuses naming the field path
(``spec.containers[0].resources.limits['nvidia.com/gpumem']``) and the value:

* a value outside the quantity grammar (:mod:`vslice_core.quantities`: ASCII digits, no
  blanks), as the API server refuses it;
* memory beyond :data:`MAX_MEMORY_MIB` or a GPU count beyond :data:`MAX_GPUS`, which the
  node side cannot represent;
* a value Kubernetes would not keep as written (beyond 2^63-1, finer than ``1n``);
* ``requests`` unlike ``limits`` for the same resource (compared as numbers: ``3k`` equals
  ``3000``): the API server refuses that for extended resources, and the scheduler and the
  device plugin would otherwise disagree about the slice.

Rules (DESIGN.md), then applied per container, with messages naming the resource
(``nvidia.com/gpucores must be 0..100, got 120``):

* limits are read first; a managed resource given only under ``requests`` is copied to limits;
* a container naming memory, percent or cores without a GPU count gets ``gpus: 1``;
* neither memory nor percent means the whole GPU (``memory_percent = 100``) and, without a
  cores value, exclusivity (``cores: 100``); memory without cores means ``cores: 0``;
* init containers keep ``init=True`` (their usage is collapsed per GPU, see the ledger);
  sidecars (``restartPolicy: Always``) run beside the app containers and count as such, and a
  pod with a GPU sidecar has all its GPU init containers counted as app containers so that a
  sidecar and an init container running together are never under-counted.

:func:`normalize_pod` returns the request and the limit changes the webhook patches in, so the
kubelet, the device plugin and the extender all see the same numbers; ``vslice plan``, the
extender and the SDK read pods through it. :func:`normalize_gpu_pod` is the webhook's one
call: the same pass, which checks the values of a pod that asks for no GPU too, and nothing
more for such a pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from vslice_core import annotations as keys
from vslice_core.errors import InvalidRequest
from vslice_core.gputypes import has_words
from vslice_core.model import GPU_POLICIES, NODE_POLICIES, ContainerRequest, PodRequest
from vslice_core.quantities import (
    LARGEST,
    Quantity,
    read_quantity,
    to_count,
    to_mib,
    within_kubernetes,
)
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

MAX_MEMORY_MIB = LARGEST >> 20
"""The shim keeps a limit in bytes in a signed 64-bit integer: MiB * 2**20 must fit."""
MAX_GPUS = 2**31 - 1
"""The kubelet asks the device plugin for devices with an int32 count."""


class LimitChange(BaseModel):
    """One limit the webhook must set on a container."""

    model_config = ConfigDict(frozen=True)

    container: str
    init: bool
    index: int
    resource: str
    value: str

    @property
    def path(self) -> str:
        """JSON-Patch path of the limit (``/`` in the resource name escaped as ``~1``)."""
        kind = "initContainers" if self.init else "containers"
        name = self.resource.replace("~", "~0").replace("/", "~1")
        return f"/spec/{kind}/{self.index}/resources/limits/{name}"


class NormalizedPod(BaseModel):
    model_config = ConfigDict(frozen=True)

    request: PodRequest
    changes: list[LimitChange]
    count_only: bool = False
    """The pod asks whole GPUs by their count alone: its GPU containers name the GPU resource
    and no other vslice resource (no memory, percentage, cores or priority) and it selects no
    GPU by type, UUID or NUMA node. On the DRA path such a pod keeps its ``nvidia.com/gpu``
    limit, which a DeviceClass' ``extendedResourceName`` turns into a claim of whole GPUs
    (docs/kubernetes-versions.md, "Extended resources served by DRA"). A pod the webhook
    normalized for the extender path never is one: it gains a cores limit."""


def _invalid(field: str, expectation: str, value: object) -> InvalidRequest:
    return InvalidRequest(f"{field} must be {expectation}, got {value}", field=field, value=value)


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid(field, "a mapping", repr(value))
    return value


def _bounds(names: ResourceNames) -> dict[str, int]:
    return {names.memory: MAX_MEMORY_MIB, names.gpu: MAX_GPUS}


def _quantity(value: object, resource: str, where: str, names: ResourceNames) -> Quantity:
    """One value read and checked: grammar, the node side's bound, Kubernetes' range."""
    quantity = read_quantity(value, where)
    bound = _bounds(names).get(resource)
    number = quantity.mib if resource == names.memory else quantity.number
    if bound is not None and number > bound:
        raise InvalidRequest(
            f"{where} must be at most {bound}, got {value!r}", field=where, value=value
        )
    return within_kubernetes(quantity, where)


def _values(section: Mapping[str, Any], where: str, names: ResourceNames) -> dict[str, Quantity]:
    """The vslice values of one ``limits`` or ``requests`` mapping, read once."""
    read = {}
    for resource in (*names.managed(), names.priority):
        if resource in section:
            read[resource] = _quantity(section[resource], resource, f"{where}[{resource!r}]", names)
    return read


class _Container:
    """One container's vslice values, read once, and what the webhook must patch."""

    def __init__(
        self, spec: Mapping[str, Any], index: int, init: bool, names: ResourceNames
    ) -> None:
        self.field = f"spec.{'initContainers' if init else 'containers'}[{index}]"
        self.spec, self.index, self.init = spec, index, init
        resources = _mapping(spec.get("resources"), f"{self.field}.resources")
        limits = _mapping(resources.get("limits"), f"{self.field}.resources.limits")
        requests = _mapping(resources.get("requests"), f"{self.field}.resources.requests")
        self.limits = _values(limits, f"{self.field}.resources.limits", names)
        self.requests = _values(requests, f"{self.field}.resources.requests", names)
        self.asks_for_gpus = any(r in self.limits or r in self.requests for r in names.managed())
        self._requests_match()
        self.changes: list[LimitChange] = []

    def _requests_match(self) -> None:
        for resource, asked in self.requests.items():
            limit = self.limits.get(resource)
            if limit is not None and asked.number != limit.number:
                where = f"{self.field}.resources.requests[{resource!r}]"
                raise InvalidRequest(
                    f"{where} must equal limits ({limit.value!r}) for a GPU resource, got "
                    f"{asked.value!r}: set the value once, under limits",
                    field=where,
                    value=asked.value,
                )

    @property
    def name(self) -> str:
        name = self.spec.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid(f"{self.field}.name", "a non-empty string", repr(name))
        return name

    def read(self, resource: str) -> Quantity | None:
        if resource in self.limits:
            return self.limits[resource]
        if resource in self.requests:
            value = self.requests[resource]
            self.change(resource, str(value.value))
            return value
        return None

    def change(self, resource: str, value: str) -> None:
        self.changes.append(
            LimitChange(
                container=self.name,
                init=self.init,
                index=self.index,
                resource=resource,
                value=value,
            )
        )


def _container_request(
    container: _Container, names: ResourceNames, init: bool
) -> ContainerRequest | None:
    name = container.name  # every container of a pod that is judged needs one, GPU or not
    raw_gpus = container.read(names.gpu)
    raw_memory = container.read(names.memory)
    raw_percent = container.read(names.memory_percent)
    raw_cores = container.read(names.cores)
    shares = (raw_memory, raw_percent, raw_cores)
    if raw_gpus is None and all(value is None for value in shares):
        return None
    gpus = 1 if raw_gpus is None else to_count(raw_gpus, names.gpu)
    if raw_gpus is None:
        container.change(names.gpu, "1")
    if gpus == 0:
        given = next(
            (n for n, v in zip(names.managed()[1:], shares, strict=True) if v is not None), None
        )
        if given is None:
            return None
        raise _invalid(names.gpu, f"at least 1 when {given} is set", 0)
    memory = _memory(raw_memory, names)
    percent = _percent(raw_percent, names)
    if memory is not None and percent is not None:
        raise _invalid(names.memory_percent, f"unset when {names.memory} is set", percent)
    cores = None if raw_cores is None else _cores(raw_cores, names)
    if memory is None and percent is None:
        percent = 100
        if cores is None:
            cores = 100
            container.change(names.cores, "100")
    return ContainerRequest(
        name=name,
        init=init,
        gpus=gpus,
        memory_mib=memory,
        memory_percent=percent,
        cores=0 if cores is None else cores,
    )


def _memory(raw: Quantity | None, names: ResourceNames) -> int | None:
    if raw is None:
        return None
    memory = to_mib(raw, names.memory)
    if memory < 1:
        raise _invalid(names.memory, "at least 1 MiB", raw.value)
    return memory


def _percent(raw: Quantity | None, names: ResourceNames) -> int | None:
    if raw is None:
        return None
    percent = to_count(raw, names.memory_percent)
    if not 1 <= percent <= 100:
        raise _invalid(names.memory_percent, "1..100", percent)
    return percent


def _cores(raw: Quantity, names: ResourceNames) -> int:
    cores = to_count(raw, names.cores)
    if cores > 100:
        raise _invalid(names.cores, "0..100", cores)
    return cores


def _annotation(annotations: Mapping[str, Any], key: str) -> tuple[str, str] | None:
    """The value of a user annotation under its vslice key, else its HAMi alias."""
    for name in (key, keys.HAMI_ALIASES[key]):
        if name in annotations:
            value = annotations[name]
            if not isinstance(value, str):
                raise _invalid(name, "a string", repr(value))
            return name, value
    return None


def _listed(annotations: Mapping[str, Any], key: str) -> list[str]:
    found = _annotation(annotations, key)
    if found is None:
        return []
    return [item.strip() for item in found[1].split(",") if item.strip()]


def _types(annotations: Mapping[str, Any], key: str) -> list[str]:
    listed = _listed(annotations, key)
    found = _annotation(annotations, key)
    if found is not None and not all(has_words(item) for item in listed):
        # "-" or "*" would match no model at all: a typo, not a filter anyone means.
        name, value = found
        raise _invalid(
            name,
            "a comma list of GPU models with a letter or digit each, such as 'A100,L4'",
            repr(value),
        )
    return listed


def _choice(annotations: Mapping[str, Any], key: str, choices: Sequence[str], default: str) -> str:
    found = _annotation(annotations, key)
    if found is None:
        return default
    name, value = found
    if value.strip().lower() not in choices:
        raise _invalid(name, f"one of {', '.join(choices)}", repr(value))
    return value.strip().lower()


def _selectors(annotations: Mapping[str, Any]) -> dict[str, Any]:
    numa = _choice(annotations, keys.NUMA_BIND, ("true", "false"), "false")
    return {
        "gpu_types": _types(annotations, keys.GPU_TYPE),
        "gpu_types_exclude": _types(annotations, keys.GPU_TYPE_EXCLUDE),
        "gpu_uuids": _listed(annotations, keys.GPU_UUID),
        "gpu_uuids_exclude": _listed(annotations, keys.GPU_UUID_EXCLUDE),
        "numa_bind": numa == "true",
        "node_policy": _choice(annotations, keys.NODE_POLICY, NODE_POLICIES, "binpack"),
        "gpu_policy": _choice(annotations, keys.GPU_POLICY, GPU_POLICIES, "spread"),
    }


def _containers(spec: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    items = spec.get(kind)
    if items is None:
        return []
    if not isinstance(items, list):
        raise _invalid(f"spec.{kind}", "a list", repr(items))
    for position, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _invalid(f"spec.{kind}[{position}]", "a mapping", repr(item))
    return items


def _is_sidecar(spec: Mapping[str, Any]) -> bool:
    return spec.get("restartPolicy") == "Always"


def _read_containers(spec: Mapping[str, Any], names: ResourceNames) -> list[_Container]:
    """Every init container, then every container, with its vslice values read and checked."""
    inits = _containers(spec, "initContainers")
    apps = _containers(spec, "containers")
    return [
        _Container(item, position, kind == "initContainers", names)
        for kind, items in (("initContainers", inits), ("containers", apps))
        for position, item in enumerate(items)
    ]


def _requests(
    containers: list[_Container], names: ResourceNames
) -> tuple[list[ContainerRequest], list[LimitChange]]:
    parsed: list[tuple[_Container, ContainerRequest | None, bool]] = []
    for container in containers:
        as_init = container.init and not _is_sidecar(container.spec)
        parsed.append((container, _container_request(container, names, as_init), as_init))
    requests = [request for _, request, _ in parsed if request is not None]
    sidecar_gpus = any(
        request is not None and container.init and not as_init
        for container, request, as_init in parsed
    )
    if sidecar_gpus:
        requests = [request.model_copy(update={"init": False}) for request in requests]
    changes = [change for container, _, _ in parsed for change in container.changes]
    return requests, changes


def _pod(manifest: object) -> Mapping[str, Any]:
    if not isinstance(manifest, Mapping):
        raise _invalid("pod", "a mapping (a Pod manifest)", repr(manifest))
    return manifest


def _normalized(
    metadata: Mapping[str, Any], containers: list[_Container], names: ResourceNames
) -> NormalizedPod:
    annotations = _mapping(metadata.get("annotations"), "metadata.annotations")
    requests, changes = _requests(containers, names)
    request = PodRequest(
        name=str(metadata.get("name") or metadata.get("generateName") or ""),
        namespace=str(metadata.get("namespace") or "default"),
        uid=str(metadata.get("uid") or ""),
        containers=requests,
        priority=_priority(containers, names),
        **_selectors(annotations),
    )
    return NormalizedPod(
        request=request, changes=changes, count_only=_count_only(request, containers, names)
    )


def _count_only(request: PodRequest, containers: list[_Container], names: ResourceNames) -> bool:
    """See :attr:`NormalizedPod.count_only`."""
    if not request.containers or request.priority is not None:
        return False
    selected = request.gpu_types or request.gpu_types_exclude or request.gpu_uuids
    if selected or request.gpu_uuids_exclude or request.numa_bind:
        return False
    only = {names.gpu}
    return all(
        set(container.limits) | set(container.requests) <= only
        for container in containers
        if container.asks_for_gpus
    )


def normalize_pod(
    manifest: Mapping[str, Any], names: ResourceNames = DEFAULT_RESOURCE_NAMES
) -> NormalizedPod:
    """The pod's normalized GPU request and the limit changes that make the pod say the same."""
    pod = _pod(manifest)
    metadata = _mapping(pod.get("metadata"), "metadata")
    spec = _mapping(pod.get("spec"), "spec")
    return _normalized(metadata, _read_containers(spec, names), names)


def normalize_gpu_pod(
    manifest: Mapping[str, Any], names: ResourceNames = DEFAULT_RESOURCE_NAMES
) -> NormalizedPod | None:
    """The webhook's one call: every vslice value checked as :func:`normalize_pod` checks it,
    whether or not the pod asks for a GPU; then None when no container or init container names
    a GPU resource (as :func:`uses_gpus`: nothing else of such a pod is vslice's to judge),
    else the normalized pod."""
    pod = _pod(manifest)
    containers = _read_containers(_mapping(pod.get("spec"), "spec"), names)
    if not any(container.asks_for_gpus for container in containers):
        return None
    return _normalized(_mapping(pod.get("metadata"), "metadata"), containers, names)


def _priority(containers: list[_Container], names: ResourceNames) -> int | None:
    """The first app container's priority limit."""
    for container in containers:
        if not container.init and names.priority in container.limits:
            return to_count(container.limits[names.priority], names.priority)
    return None


def pod_request(
    manifest: Mapping[str, Any], names: ResourceNames = DEFAULT_RESOURCE_NAMES
) -> PodRequest:
    return normalize_pod(manifest, names).request


def uses_gpus(manifest: Mapping[str, Any], names: ResourceNames = DEFAULT_RESOURCE_NAMES) -> bool:
    """Whether any container or init container mentions a managed resource (no validation)."""
    spec = manifest.get("spec") if isinstance(manifest, Mapping) else None
    if not isinstance(spec, Mapping):
        return False
    managed = set(names.managed())
    for kind in ("initContainers", "containers"):
        items = spec.get(kind)
        for item in items if isinstance(items, list) else []:
            resources = item.get("resources") if isinstance(item, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for part in ("limits", "requests"):
                section = resources.get(part)
                if isinstance(section, Mapping) and managed & set(section):
                    return True
    return False


def limit_patch(
    manifest: Mapping[str, Any], changes: Sequence[LimitChange]
) -> list[dict[str, Any]]:
    """JSON-Patch operations applying ``changes``, creating ``resources``/``limits`` if absent."""
    spec = _mapping(manifest.get("spec"), "spec")
    created: set[str] = set()
    operations: list[dict[str, Any]] = []
    for change in changes:
        kind = "initContainers" if change.init else "containers"
        container = _containers(spec, kind)[change.index]
        resources = container.get("resources")
        base = f"/spec/{kind}/{change.index}/resources"
        if not isinstance(resources, Mapping) and base not in created:
            operations.append({"op": "add", "path": base, "value": {}})
            created.add(base)
        has_limits = isinstance(resources, Mapping) and isinstance(resources.get("limits"), Mapping)
        if not has_limits and f"{base}/limits" not in created:
            operations.append({"op": "add", "path": f"{base}/limits", "value": {}})
            created.add(f"{base}/limits")
        operations.append({"op": "add", "path": change.path, "value": change.value})
    return operations
