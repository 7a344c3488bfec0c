"""``Slice``: what a user asks for, validated before anything reaches the cluster.

A slice is a share of one or more GPUs: memory (``"10Gi"``, a number of MiB, or ``"30%"``
of each card), a share of the card's compute (``cores``, percent of its SMs), how many GPUs,
filters on GPU model and UUID, and placement policies. It becomes Kubernetes container
limits and pod annotations with the names fixed in the design (HAMi-compatible), so the
webhook and the extender read it exactly as they read a hand-written manifest::

    Slice(memory="10Gi", cores=30).limits()
    -> {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240", "nvidia.com/gpucores": "30"}

With ``path="dra"`` the slice takes the DRA path instead: the pod names a ResourceClaimTemplate
of driver ``gpu.vslice.io`` (built from the same request by ``vslice_core.dra.claims``) and
kube-scheduler's DRA allocator places it (see :mod:`vslice.manifests`).

Every bad value raises :class:`vslice.errors.InvalidRequest` naming the field, the value and
the valid range or choices. Whether a GPU model exists is a question about a cluster, so
:meth:`vslice.Client.plan` and :meth:`vslice.Client.run` check it against the live one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from vslice_core.annotations import (
    GPU_POLICY,
    GPU_TYPE,
    GPU_TYPE_EXCLUDE,
    GPU_UUID,
    GPU_UUID_EXCLUDE,
    NODE_POLICY,
    NUMA_BIND,
)
from vslice_core.model import GPU_POLICIES, NODE_POLICIES, GpuPolicy, NodePolicy
from vslice_core.quantities import format_mib as format_mib  # re-exported: the SDK spelling
from vslice_core.quantities import to_mib
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice.errors import InvalidRequest

# A PriorityClass name is a DNS subdomain (RFC 1123), as Kubernetes validates object names.
_DNS_SUBDOMAIN = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
MAX_GPUS: Final = 64

_PERCENT = re.compile(r"^\s*(?P<number>-?\d+(?:\.\d+)?)\s*%\s*$")
# "10G" is ambiguous: in a manifest the API server's canonical form makes it 10e9 MiB
# (see vslice_core.quantities), while a person typing it means gigabytes. Refuse it.
_DECIMAL_SIZE = re.compile(r"^\s*-?\d+(?:\.\d+)?\s*[kMGTPE]B?\s*$")
_MEMORY_HELP: Final = "a size like '10Gi' or '512Mi', a number of MiB, or a percentage '1%'..'100%'"
PATHS: Final = ("extender", "dra")
SlicePath = Literal["extender", "dra"]


def parse_memory(value: str | int) -> tuple[int | None, int | None]:
    """Read a memory request as ``(memory_mib, memory_percent)``; exactly one is set.

    Sizes are read by the core's quantity parser (a plain number is MiB, as in HAMi's
    ``nvidia.com/gpumem``), so the SDK and the webhook agree on every spelling.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"memory must be {_MEMORY_HELP}, got {value!r}")
    percent = _PERCENT.match(value) if isinstance(value, str) else None
    if percent:
        number = float(percent["number"])
        if not number.is_integer() or not 1 <= number <= 100:
            raise ValueError(f"memory percentage must be a whole number 1..100%, got {value!r}")
        return None, int(number)
    if isinstance(value, str) and _DECIMAL_SIZE.match(value):
        raise ValueError(
            f"memory takes binary units such as '10Gi' or '512Mi' (a decimal unit would count "
            f"MiB in a manifest), got {value!r}"
        )
    try:
        mib = to_mib(value, "memory")
    except InvalidRequest as exc:
        raise ValueError(f"{exc} (memory takes {_MEMORY_HELP})") from None
    if mib < 1:
        raise ValueError(f"memory must be at least 1 MiB, got {value!r}")
    return mib, None


def _names(value: Any, field: str) -> tuple[str, ...]:
    """A comma list or an iterable of names, as a tuple of stripped, non-empty names."""
    if value is None:
        return ()
    items: Iterable[Any] = value.split(",") if isinstance(value, str) else value
    names = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{field} must be names (strings), got {item!r}")
        name = item.strip()
        if "," in name or any(c.isspace() for c in name):
            raise ValueError(f"{field} entries may not contain commas or spaces, got {item!r}")
        if name:
            names.append(name)
    return tuple(dict.fromkeys(names))


class Slice(BaseModel):
    """A validated request for a share of one or more GPUs.

    ``memory`` accepts ``"10Gi"``, ``"512Mi"``, an ``int`` number of MiB, or ``"30%"`` of
    each GPU; without it the slice takes whole GPUs. ``cores`` is the share of each GPU's
    compute in percent (0..100). Constructing a Slice with a bad value raises
    :class:`vslice.errors.InvalidRequest` (also a ``ValueError``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_mib: int | None = Field(None, description="GPU memory per GPU in MiB.")
    memory_percent: int | None = Field(None, description="GPU memory per GPU, percent 1..100.")
    cores: int | None = Field(None, description="Share of each GPU's SMs, percent 0..100.")
    gpus: int = Field(1, description=f"Number of GPUs, 1..{MAX_GPUS}.")
    gpu_type: tuple[str, ...] = Field(
        (),
        description="Only GPUs whose model has one as whole words (docs/annotations.md).",
    )
    exclude_gpu_type: tuple[str, ...] = Field(
        (), description="No GPU whose model has one as whole words."
    )
    gpu_uuid: tuple[str, ...] = Field((), description="Only these GPU UUIDs (exact).")
    exclude_gpu_uuid: tuple[str, ...] = Field((), description="Never these GPU UUIDs.")
    node_policy: NodePolicy | None = Field(None, description="binpack (default) or spread.")
    gpu_policy: GpuPolicy | None = Field(
        None, description="binpack, spread (default), mutex or topology."
    )
    numa_bind: bool = Field(False, description="All GPUs on one NUMA node.")
    path: SlicePath = Field(
        "extender", description="extender (default: limits and annotations) or dra (a claim)."
    )
    priority_class: str | None = Field(
        None,
        description="The pod's PriorityClass: a higher one may preempt lower-priority slices "
        "when the GPUs are full (docs/preemption.md).",
    )

    def __init__(
        self,
        memory: str | int | None = None,
        *,
        cores: int | None = None,
        gpus: int = 1,
        gpu_type: str | Iterable[str] | None = None,
        exclude_gpu_type: str | Iterable[str] | None = None,
        gpu_uuid: str | Iterable[str] | None = None,
        exclude_gpu_uuid: str | Iterable[str] | None = None,
        node_policy: str | None = None,
        gpu_policy: str | None = None,
        numa_bind: bool = False,
        path: str = "extender",
        priority_class: str | None = None,
        **fields: Any,
    ) -> None:
        data: dict[str, Any] = {
            "cores": cores,
            "gpus": gpus,
            "gpu_type": gpu_type,
            "exclude_gpu_type": exclude_gpu_type,
            "gpu_uuid": gpu_uuid,
            "exclude_gpu_uuid": exclude_gpu_uuid,
            "node_policy": node_policy,
            "gpu_policy": gpu_policy,
            "numa_bind": numa_bind,
            "path": path,
            "priority_class": priority_class,
            **fields,
        }
        if memory is not None:
            try:
                data["memory_mib"], data["memory_percent"] = parse_memory(memory)
            except ValueError as exc:
                raise InvalidRequest(str(exc), field="memory", value=memory) from None
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _invalid_request(exc) from None
        self._check_consistency()

    @field_validator("memory_mib", mode="before")
    @classmethod
    def _memory_mib(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"memory_mib must be a whole number of MiB, got {value!r}")
        if value is not None and value < 1:
            raise ValueError(f"memory_mib must be at least 1, got {value!r}")
        return value

    @field_validator("memory_percent", "cores", mode="before")
    @classmethod
    def _percent(cls, value: Any, info: Any) -> Any:
        low = 1 if info.field_name == "memory_percent" else 0
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 100:
            raise ValueError(f"{info.field_name} must be a whole number {low}..100, got {value!r}")
        return value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GPUS:
            raise ValueError(f"gpus must be a whole number 1..{MAX_GPUS}, got {value!r}")
        return value

    @field_validator("gpu_type", "exclude_gpu_type", "gpu_uuid", "exclude_gpu_uuid", mode="before")
    @classmethod
    def _name_lists(cls, value: Any, info: Any) -> tuple[str, ...]:
        return _names(value, info.field_name)

    @field_validator("node_policy", "gpu_policy", mode="before")
    @classmethod
    def _policy(cls, value: Any, info: Any) -> Any:
        choices = NODE_POLICIES if info.field_name == "node_policy" else GPU_POLICIES
        if value is None:
            return None
        name = value.strip().lower() if isinstance(value, str) else value
        if name not in choices:
            raise ValueError(
                f"{info.field_name} must be one of {', '.join(sorted(choices))}, got {value!r}"
            )
        return name

    @field_validator("priority_class", mode="before")
    @classmethod
    def _priority_class(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or not _DNS_SUBDOMAIN.fullmatch(value):
            raise ValueError(
                "priority_class must be a PriorityClass name (lower-case letters, digits, '-' "
                f"and '.', at most 253 characters), got {value!r}"
            )
        return value

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        if value not in PATHS:
            raise ValueError(f"path must be one of {', '.join(PATHS)}, got {value!r}")
        return value

    def _check_consistency(self) -> None:
        if self.path == "dra" and self.memory_percent not in (None, 100):
            raise InvalidRequest(
                f"memory {self.memory_percent}% cannot be asked on the DRA path (a claim asks "
                "an absolute amount of memory, the same on every card); give memory as a size "
                "such as '8Gi' or a number of MiB, '100%' for the whole card, or "
                "path='extender'",
                field="memory",
                value=f"{self.memory_percent}%",
            )
        if self.memory_mib is not None and self.memory_percent is not None:
            raise InvalidRequest(
                "give memory either in MiB or as a percentage, not both",
                field="memory",
                value=(self.memory_mib, self.memory_percent),
            )
        if self.gpu_uuid and len(self.gpu_uuid) < self.gpus:
            raise InvalidRequest(
                f"gpus={self.gpus} but gpu_uuid allows only {len(self.gpu_uuid)} GPU(s): "
                f"{', '.join(self.gpu_uuid)}",
                field="gpu_uuid",
                value=self.gpu_uuid,
            )
        if clash := set(self.gpu_uuid) & set(self.exclude_gpu_uuid):
            raise InvalidRequest(
                f"gpu_uuid and exclude_gpu_uuid both name {', '.join(sorted(clash))}",
                field="exclude_gpu_uuid",
                value=self.exclude_gpu_uuid,
            )

    @property
    def exclusive(self) -> bool:
        """Whole GPUs: no memory given and no cores given (the design's exclusive rule)."""
        return self.memory_mib is None and self.memory_percent is None and self.cores is None

    def limits(self, names: ResourceNames = DEFAULT_RESOURCE_NAMES) -> dict[str, str]:
        """Container resource limits (Kubernetes quantities are strings)."""
        limits = {names.gpu: str(self.gpus)}
        if self.memory_mib is not None:
            limits[names.memory] = str(self.memory_mib)
        if self.memory_percent is not None:
            limits[names.memory_percent] = str(self.memory_percent)
        if self.cores is not None:
            limits[names.cores] = str(self.cores)
        return limits

    def annotations(self) -> dict[str, str]:
        """Pod annotations for the filters and policies that are set."""
        lists = {
            GPU_TYPE: self.gpu_type,
            GPU_TYPE_EXCLUDE: self.exclude_gpu_type,
            GPU_UUID: self.gpu_uuid,
            GPU_UUID_EXCLUDE: self.exclude_gpu_uuid,
        }
        annotations = {key: ",".join(names) for key, names in lists.items() if names}
        if self.node_policy:
            annotations[NODE_POLICY] = self.node_policy
        if self.gpu_policy:
            annotations[GPU_POLICY] = self.gpu_policy
        if self.numa_bind:
            annotations[NUMA_BIND] = "true"
        return annotations

    def describe(self) -> str:
        """A short human summary, e.g. ``1 GPU, 10 GiB, 30% cores``."""
        parts = [f"{self.gpus} GPU" + ("s" if self.gpus > 1 else "")]
        if self.memory_mib is not None:
            parts.append(format_mib(self.memory_mib) + (" each" if self.gpus > 1 else ""))
        elif self.memory_percent is not None:
            parts.append(f"{self.memory_percent}% memory")
        else:
            parts.append("whole memory")
        if self.cores is not None:
            parts.append(f"{self.cores}% cores")
        if self.gpu_type:
            parts.append("type " + "|".join(self.gpu_type))
        if self.path == "dra":
            parts.append("DRA path")
        if self.priority_class:
            parts.append(f"priority {self.priority_class}")
        return ", ".join(parts)

    def __str__(self) -> str:
        return self.describe()


def _invalid_request(exc: ValidationError) -> InvalidRequest:
    """The first validation problem as an InvalidRequest naming field, value and the rule."""
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "slice"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        known = ", ".join(["memory", *sorted(Slice.model_fields)])
        message = f"unknown field {field!r}; valid fields: {known}"
    elif field not in message:
        message = f"{field}: {message}, got {error['input']!r}"
    return InvalidRequest(message, field=field, value=error["input"])
