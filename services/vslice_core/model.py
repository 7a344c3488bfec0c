"""The domain model: GPUs, node inventories, slice requests, allocations, quotas, decisions.

These pydantic models are the boundary types every part exchanges (webhook, extender,
device plugin, SDK, ``vslice plan``). The placement engine converts them once into
plain slotted objects for its hot loop (see :mod:`vslice_core.placement`).

Units: memory is always a whole number of MiB; cores are percent of a GPU's SMs (0-100).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from vslice_core.gputypes import has_words

NodePolicy = Literal["binpack", "spread"]
GpuPolicy = Literal["binpack", "spread", "mutex", "topology"]
NODE_POLICIES: tuple[str, ...] = ("binpack", "spread")
GPU_POLICIES: tuple[str, ...] = ("binpack", "mutex", "spread", "topology")

# Reason codes, per GPU in the order the engine checks them, then per node.
GPU_REASONS: tuple[str, ...] = (
    "unhealthy",
    "cordoned",
    "type_mismatch",
    "uuid_mismatch",
    "slots_exhausted",
    "mutex_busy",
    "insufficient_memory",
    "insufficient_cores",
    "exclusive_conflict",
    "cores_exhausted",
    "numa_mismatch",
)
NODE_REASONS: tuple[str, ...] = ("too_few_gpus", "quota_exceeded")
REASONS: tuple[str, ...] = GPU_REASONS + NODE_REASONS

# A request for this many cores (percent) takes the GPU exclusively.
EXCLUSIVE_CORES = 100


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuUsage(_Model):
    """What is already taken on one GPU: slices (slots), memory and cores."""

    slots: int = Field(0, ge=0, description="slices currently placed on the GPU")
    memory_mib: int = Field(0, ge=0, description="MiB promised to those slices")
    cores: int = Field(0, ge=0, description="percent of SMs promised to those slices")


class Gpu(_Model):
    """One physical GPU as a node advertises it."""

    uuid: str = Field(
        pattern=r"^[^\s,]+$", description="NVIDIA UUID, e.g. GPU-5f1c... (no spaces or commas)"
    )
    model: str = Field(min_length=1, description="product name, e.g. NVIDIA-A100-SXM4-80GB")
    memory_mib: int = Field(gt=0, description="total device memory in MiB")
    cores: int = Field(100, gt=0, description="percent of SMs that can be handed out")
    slots: int = Field(gt=0, description="most slices this GPU may hold at once")
    index: int = Field(ge=0, description="device index on the node (nvidia-smi order)")
    numa: int = Field(0, ge=0, description="NUMA node the GPU is attached to")
    healthy: bool = True
    cordoned: bool = Field(False, description="an operator keeps new slices off this GPU")


def pair_key(a: str, b: str) -> str:
    """The canonical topology key of an unordered GPU pair: the two UUIDs sorted, comma-joined."""
    return f"{a},{b}" if a <= b else f"{b},{a}"


def _default_indices(data: Any) -> Any:
    """Give GPUs without an ``index`` their position in the list (the CLUSTER default)."""
    if isinstance(data, dict) and isinstance(data.get("gpus"), list):
        gpus = [
            {**gpu, "index": position} if isinstance(gpu, dict) and "index" not in gpu else gpu
            for position, gpu in enumerate(data["gpus"])
        ]
        data = {**data, "gpus": gpus}
    return data


def _check_gpus(gpus: list[Gpu]) -> None:
    uuids = [gpu.uuid for gpu in gpus]
    duplicate = next((u for u in uuids if uuids.count(u) > 1), None)
    if duplicate is not None:
        raise ValueError(f"gpus[].uuid must be unique, got {duplicate!r} twice")
    indices = [gpu.index for gpu in gpus]
    twice = next((i for i in indices if indices.count(i) > 1), None)
    if twice is not None:
        raise ValueError(f"gpus[].index must be unique, got {twice} twice")


def _normalize_topology(topology: dict[str, int]) -> dict[str, int]:
    """Keys in canonical order. Pairs naming a GPU the node does not list are kept: they are
    harmless (never looked up) and a GPU that is back after a repair finds its links again."""
    normalized: dict[str, int] = {}
    for key, score in topology.items():
        parts = [part.strip() for part in key.split(",")]
        if len(parts) != 2 or parts[0] == parts[1] or not all(parts):
            raise ValueError(f"topology keys must be 'UUID-A,UUID-B' of two GPUs, got {key!r}")
        normalized[pair_key(parts[0], parts[1])] = score
    return normalized


class NodeInventory(_Model):
    """A node's GPUs and the link scores between pairs of them (higher = better link)."""

    name: str = Field(min_length=1)
    gpus: list[Gpu] = Field(default_factory=list)
    topology: dict[str, int] = Field(default_factory=dict, description="'UUID-A,UUID-B' -> score")

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        return _default_indices(data)

    @model_validator(mode="after")
    def _consistent(self) -> NodeInventory:
        _check_gpus(self.gpus)
        normalized = _normalize_topology(self.topology)
        object.__setattr__(self, "topology", normalized)
        return self

    def link(self, a: str, b: str) -> int:
        """Link score between two GPUs of this node (0 when unknown)."""
        return self.topology.get(pair_key(a, b), 0)


class ContainerRequest(_Model):
    """One container's normalized slice request: ``gpus`` GPUs, each with this much."""

    name: str
    init: bool = Field(False, description="an init container (runs before the app containers)")
    gpus: int = Field(ge=1, description="number of GPUs")
    memory_mib: int | None = Field(None, ge=1, description="MiB per GPU")
    memory_percent: int | None = Field(None, ge=1, le=100, description="percent of each GPU")
    cores: int = Field(ge=0, le=100, description="percent of SMs per GPU")

    @model_validator(mode="after")
    def _one_memory(self) -> ContainerRequest:
        if (self.memory_mib is None) == (self.memory_percent is None):
            raise ValueError("exactly one of memory_mib and memory_percent must be set")
        return self

    @property
    def exclusive(self) -> bool:
        """Asks for every core: no other slice may share the GPU."""
        return self.cores >= EXCLUSIVE_CORES

    def memory_on(self, gpu_memory_mib: int) -> int:
        """MiB this request takes on a GPU of that size (percent rounds down)."""
        if self.memory_mib is not None:
            return self.memory_mib
        return gpu_memory_mib * (self.memory_percent or 0) // 100


class PodRequest(_Model):
    """A pod's normalized GPU request, as the webhook leaves it and the extender reads it."""

    name: str = ""
    namespace: str = "default"
    uid: str = ""
    containers: list[ContainerRequest] = Field(default_factory=list)
    gpu_types: list[str] = Field(
        default_factory=list,
        description="wanted GPU models, lower case; a GPU matches one whose words are a run of "
        "its model's words (vslice_core.gputypes)",
    )
    gpu_types_exclude: list[str] = Field(
        default_factory=list, description="GPU models never used, matched the same way"
    )
    gpu_uuids: list[str] = Field(default_factory=list, description="exact UUIDs")
    gpu_uuids_exclude: list[str] = Field(default_factory=list)
    numa_bind: bool = False
    node_policy: NodePolicy = "binpack"
    gpu_policy: GpuPolicy = "spread"
    priority: int | None = None

    @field_validator("gpu_types", "gpu_types_exclude")
    @classmethod
    def _lower(cls, values: list[str]) -> list[str]:
        wordless = next((value for value in values if not has_words(value)), None)
        if wordless is not None:
            # It would match no model at all: a typo, not a filter anyone means.
            raise ValueError(f"a GPU type must have a letter or digit, got {wordless!r}")
        return [value.lower() for value in values]

    @property
    def wants_gpus(self) -> bool:
        return bool(self.containers)


class GpuGrant(_Model):
    """One GPU given to one container: which one, and how much of it."""

    uuid: str = Field(min_length=1)
    index: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    cores: int = Field(ge=0, le=100)


class ContainerAllocation(_Model):
    name: str
    init: bool = False
    gpus: list[GpuGrant] = Field(default_factory=list)


class Allocation(_Model):
    """Where a pod's slices live: the node and, per container, the GPUs granted."""

    node: str = Field(min_length=1)
    containers: list[ContainerAllocation] = Field(default_factory=list)


class QuotaLimits(_Model):
    """A namespace's ceiling; ``None`` leaves that dimension unlimited."""

    memory_mib: int | None = Field(None, ge=0)
    cores: int | None = Field(None, ge=0)
    gpus: int | None = Field(None, ge=0, description="GPU slices (one per container per GPU)")


class QuotaUsage(_Model):
    memory_mib: int = Field(0, ge=0)
    cores: int = Field(0, ge=0)
    gpus: int = Field(0, ge=0)


class NamespaceQuota(_Model):
    """A namespace quota; ``used`` is usage outside the allocations the ledger knows."""

    limits: QuotaLimits = Field(default_factory=QuotaLimits)
    used: QuotaUsage = Field(default_factory=QuotaUsage)


class QuotaCheck(_Model):
    """The namespace quota a decision was checked against, with what counts against it now
    (its own ``used`` plus the allocations the ledger records for the namespace)."""

    namespace: str
    limits: QuotaLimits
    used: QuotaUsage


class NodeRoom(_Model):
    """What a node could still give a request that does not fit there: the numbers behind
    its reason codes ("the most free is 12 GiB on GPU 1, of 80 GiB"). Only GPUs the request
    may use count (healthy, not cordoned, of a wanted model and UUID)."""

    gpus: int = Field(ge=0, description="GPUs on the node")
    usable: int = Field(ge=0, description="GPUs the request may use")
    open: int = Field(ge=0, description="usable GPUs with a free slice slot")
    largest_mib: int = Field(ge=0, description="memory of the largest usable GPU")
    free_mib: int = Field(ge=0, description="the most free memory on one open usable GPU")
    free_gpu: int | None = Field(None, description="index of that GPU")
    free_of_mib: int = Field(0, ge=0, description="that GPU's memory")
    free_cores: int = Field(0, ge=0, description="the most free cores on one open usable GPU")


class Suggestion(_Model):
    """A changed request that fits now, found by running the engine on it."""

    change: Literal["smaller", "fewer_gpus", "other_type"]
    node: str
    gpus: int = Field(ge=1, description="GPUs per container")
    memory_mib: int = Field(ge=0, description="MiB per GPU (the least a chosen GPU gets)")
    memory_percent: int | None = Field(
        None, description="set when the changed request still asks a percentage of each GPU"
    )
    cores: int = Field(ge=0, le=100)
    gpu_indices: list[int] = Field(default_factory=list)
    gpu_model: str | None = Field(None, description="for other_type: the model it would get")


class NodeVerdict(_Model):
    """Whether a pod fits one node, its score there, and why GPUs were rejected."""

    fits: bool
    score: float | None = None
    reasons: dict[str, int] = Field(default_factory=dict)
    room: NodeRoom | None = Field(None, description="set in explain mode when it does not fit")
    quota_charge: QuotaUsage | None = Field(
        None,
        description="with quota_exceeded: what the pod would count against its namespace's "
        "quota on this node (percent requests cost more on larger GPUs)",
    )


class Decision(_Model):
    """The engine's answer: the chosen node and allocation (or none) and per-node verdicts."""

    node: str | None = None
    allocation: Allocation | None = None
    nodes: dict[str, NodeVerdict] = Field(default_factory=dict)
    suggestions: list[Suggestion] = Field(
        default_factory=list, description="requests that would fit now (when asked for)"
    )
    quota: QuotaCheck | None = Field(
        None, description="in explain mode: the pod's namespace quota, when it has one"
    )

    @property
    def fits(self) -> bool:
        return self.node is not None


def _field_part(part: object) -> str:
    # Keys come from user YAML: one like "\n" or "" must not break the one-line message.
    text = str(part)
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def validation_message(error: ValidationError, prefix: str = "") -> tuple[str, str]:
    """The first problem of a pydantic error as (field, "<field> must be ..., got <value>")."""
    first = error.errors()[0]
    field = ".".join(_field_part(part) for part in (prefix, *first["loc"]) if part != "") or "value"
    value = first.get("input")
    shown = repr(value)
    shown = shown if len(shown) <= 120 else shown[:120] + "..."
    message: str = first["msg"]
    kind = first["type"]
    if kind == "value_error":
        return field, f"{field}: {first['ctx']['error']}"
    if kind == "missing":
        return field, f"{field} must be set, got nothing"
    if kind == "extra_forbidden":
        return field, f"{field} must not be set (unknown field), got {shown}"
    if message.startswith("Input should be "):
        message = "must be " + message.removeprefix("Input should be ")
    elif message.startswith("String should "):
        message = "must " + message.removeprefix("String should ")
    else:
        message = "must be valid: " + message[0].lower() + message[1:]
    return field, f"{field} {message}, got {shown}"
