"""Typed rows the SDK returns, and the read-only tables that hold them.

``client.gpus()`` returns a :class:`GpuTable` of :class:`GpuRow` (one per GPU, with what is
allocated on it and which pods hold it); ``client.allocations()`` returns an
:class:`AllocationTable` of :class:`AllocationRow` (one per pod, container and GPU). Tables
are sequences, render themselves in a notebook (``_repr_html_``) and as text (``str``) with
the renderers :mod:`vslice.views` registers in :mod:`vslice.rendering`, and convert to a pandas
DataFrame with ``to_pandas()`` when pandas is installed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from vslice import rendering

if TYPE_CHECKING:
    import pandas


@dataclass(frozen=True)
class GpuRow:
    """One GPU of one node: capacity, what is allocated, and the pods holding slices."""

    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    memory_used_mib: int
    cores: int
    cores_used: int
    slots: int
    slots_used: int
    numa: int = 0
    healthy: bool = True
    cordoned: bool = False
    pods: tuple[str, ...] = ()
    address: str = ""
    """The node's InternalIP (empty when the Node does not report one)."""
    path: str = "extender"
    """How pods get slices of this GPU: ``extender`` (the device plugin, placed by the scheduler
    extender) or ``dra`` (ResourceClaims of vslice's DRA driver; docs/dra.md)."""
    idle_pods: tuple[str, ...] = ()
    """Those of ``pods`` whose slices are idle (docs/idle.md)."""
    memory_backend: str = "shim"
    """What holds a slice's memory on the node: ``driver`` (the driver's own per-container
    limit, with the shim still preloaded) or ``shim`` (the shim alone); docs/shim.md."""

    @property
    def memory_free_mib(self) -> int:
        return max(0, self.memory_mib - self.memory_used_mib)

    @property
    def overbooked(self) -> bool:
        """More is booked on this GPU than it has: an allocation vslice did not make (forged,
        edited) is counted where it claims to be, and the extender places nothing more here
        until it is gone (docs/security.md)."""
        return (
            self.memory_used_mib > self.memory_mib
            or self.cores_used > self.cores
            or self.slots_used > self.slots
        )

    @property
    def cores_free(self) -> int:
        return max(0, self.cores - self.cores_used)

    @property
    def slots_free(self) -> int:
        return max(0, self.slots - self.slots_used)

    @property
    def schedulable(self) -> bool:
        return self.healthy and not self.cordoned


@dataclass(frozen=True)
class IdleMark:
    """A pod whose slices launched no kernel for a while, as its node's monitor marked it
    (``vslice.io/idle-since``, ``vslice.io/idle-reclaim-at``; docs/idle.md)."""

    since: datetime
    """The last kernel launch the monitor saw (or when it first saw the pod)."""
    reclaim_at: datetime | None = None
    """When the pod will be evicted unless it launches a kernel first (its namespace opted
    in and the pod was warned); None: it is not going to be."""

    def idle_s(self, now: datetime) -> float:
        return max(0.0, (now - self.since).total_seconds())


@dataclass(frozen=True)
class AllocationRow:
    """One GPU granted to one container of one pod."""

    namespace: str
    pod: str
    node: str
    container: str
    gpu_index: int
    gpu_uuid: str
    gpu_model: str
    memory_mib: int
    cores: int
    phase: str = ""
    path: str = "extender"
    """How the pod got the slice: ``extender`` (the node annotation) or ``dra`` (a claim)."""
    idle_since: datetime | None = None
    """The pod's last kernel launch, once its node's monitor counts it idle (docs/idle.md)."""
    reclaim_at: datetime | None = None
    """When the idle pod will be evicted unless it launches a kernel (opted-in namespaces)."""

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.pod}"


Row = TypeVar("Row", GpuRow, AllocationRow)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


class Table(Sequence[Row], Generic[Row]):
    """An immutable sequence of rows with notebook and text renderings."""

    def __init__(self, rows: Iterable[Row]) -> None:
        self._rows: tuple[Row, ...] = tuple(rows)

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Row]: ...
    def __getitem__(self, index: int | slice) -> Row | Sequence[Row]:
        return self._rows[index]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Table) and self._rows == other._rows

    def __hash__(self) -> int:
        return hash(self._rows)

    def records(self) -> list[dict[str, Any]]:
        """Rows as plain dicts (field name -> value) that JSON can hold: times as RFC 3339."""
        return [
            {key: _plain(value) for key, value in dataclasses.asdict(row).items()}
            for row in self._rows
        ]

    def to_pandas(self) -> pandas.DataFrame:
        """A DataFrame with one column per field (needs pandas, in the notebook extra)."""
        try:
            import pandas
        except ImportError as exc:  # pragma: no cover - pandas is in the notebook extra
            raise ImportError("to_pandas() needs pandas: pip install 'vslice[notebook]'") from exc
        rows = [dataclasses.asdict(row) for row in self._rows]  # times stay datetimes
        return pandas.DataFrame(rows, columns=self._columns())

    def _columns(self) -> list[str]:
        raise NotImplementedError


class GpuTable(Table[GpuRow]):
    """Every GPU of the cluster, sorted by node name, then GPU index."""

    def _columns(self) -> list[str]:
        return [f.name for f in dataclasses.fields(GpuRow)]

    def nodes(self) -> list[str]:
        return sorted({row.node for row in self})

    def models(self) -> list[str]:
        """GPU models present, sorted."""
        return sorted({row.model for row in self})

    def _repr_html_(self) -> str:
        return rendering.as_html(self)

    def __str__(self) -> str:
        return rendering.as_text(self)

    def __repr__(self) -> str:
        return f"<GpuTable: {len(self)} GPUs on {len(self.nodes())} nodes>"


class AllocationTable(Table[AllocationRow]):
    """Every GPU grant, sorted by namespace, pod, container, GPU index."""

    def _columns(self) -> list[str]:
        return [f.name for f in dataclasses.fields(AllocationRow)]

    def _repr_html_(self) -> str:
        return rendering.as_html(self)

    def __str__(self) -> str:
        return rendering.as_text(self)

    def __repr__(self) -> str:
        pods = len({row.holder for row in self})
        return f"<AllocationTable: {len(self)} GPU grants to {pods} pods>"


@dataclass(frozen=True)
class Placement:
    """Where one pod's slices landed: the node and, per container, the GPUs granted."""

    namespace: str
    pod: str
    node: str
    grants: AllocationTable

    @property
    def gpu_uuids(self) -> list[str]:
        return [row.gpu_uuid for row in self.grants]

    @property
    def gpu_models(self) -> list[str]:
        return [row.gpu_model for row in self.grants]

    @property
    def memory_mib(self) -> int:
        """GPU memory held by the pod, summed over its GPUs."""
        return sum(row.memory_mib for row in self.grants)

    @property
    def cores(self) -> int:
        """Cores held by the pod, percent of one GPU, summed over its GPUs."""
        return sum(row.cores for row in self.grants)

    def __repr__(self) -> str:
        count = len(self.grants)
        return f"<Placement {self.namespace}/{self.pod} on {self.node}: {count} GPU grant(s)>"

    def _repr_html_(self) -> str:
        return rendering.as_html(self)

    def __str__(self) -> str:
        return rendering.as_text(self)
