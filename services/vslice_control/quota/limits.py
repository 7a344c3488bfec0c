"""GPU quotas per namespace, read from ordinary ResourceQuota objects.

An operator writes the ceiling with the standard keys (resource names are configurable)::

    spec:
      hard:
        requests.nvidia.com/gpumem: "40960"     # MiB (a plain number) or bytes ("40Gi")
        requests.nvidia.com/gpucores: "200"     # percent of one GPU's SMs, summed
        requests.nvidia.com/gpu: "4"            # GPU slices (one per container per GPU)

The apiserver's own quota counts these per container as written; vslice counts what a pod
really takes (memory and cores times the number of GPUs, percentages in MiB of the GPU it
got) and enforces that at bind time. ``limits.<name>`` keys are read too; when a namespace
has several quotas or both prefixes, the smallest ceiling wins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from vslice_core.errors import InvalidRequest
from vslice_core.model import NamespaceQuota, PodRequest, QuotaLimits, QuotaUsage
from vslice_core.quantities import to_count, to_mib
from vslice_core.resources import ResourceNames

log = logging.getLogger("vslice.quota")

_FIELDS = ("memory_mib", "cores", "gpus")


def quota_keys(names: ResourceNames) -> dict[str, str]:
    """ResourceQuota ``hard`` key -> QuotaLimits field."""
    plain = {names.memory: "memory_mib", names.cores: "cores", names.gpu: "gpus"}
    return {
        f"{prefix}.{name}": field
        for prefix in ("requests", "limits")
        for name, field in plain.items()
    }


def limits_from_quotas(
    quotas: Iterable[Mapping[str, Any]], names: ResourceNames
) -> QuotaLimits | None:
    """The tightest GPU limits of a namespace's ResourceQuota objects (None: no GPU limit)."""
    keys = quota_keys(names)
    found: dict[str, int] = {}
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key, value in hard.items():
            field = keys.get(key)
            if field is None:
                continue
            try:
                amount = to_mib(value, key) if field == "memory_mib" else to_count(value, key)
            except InvalidRequest as exc:
                log.warning(
                    "ignoring unreadable quota value",
                    extra={"quota": _name(quota), "error": str(exc)},
                )
                continue
            found[field] = min(amount, found.get(field, amount))
    return QuotaLimits(**found) if found else None


def request_totals(request: PodRequest) -> QuotaUsage:
    """What a pod asks for at its peak, where it is known before placement.

    Init containers run one at a time before the app containers, so the peak is the larger
    of the biggest init container and the sum of the app containers. Percent-of-memory
    requests count only once placed (the MiB depend on the GPU).
    """

    def usage(containers: Iterable[Any]) -> list[tuple[int, int, int]]:
        return [(c.gpus * (c.memory_mib or 0), c.gpus * c.cores, c.gpus) for c in containers]

    apps = usage(c for c in request.containers if not c.init)
    inits = usage(c for c in request.containers if c.init)
    peak = [max([sum(x[i] for x in apps)] + [x[i] for x in inits]) for i in range(3)]
    return QuotaUsage(memory_mib=peak[0], cores=peak[1], gpus=peak[2])


def add_usage(a: QuotaUsage, b: QuotaUsage) -> QuotaUsage:
    return QuotaUsage(
        memory_mib=a.memory_mib + b.memory_mib, cores=a.cores + b.cores, gpus=a.gpus + b.gpus
    )


def exceeded(totals: QuotaUsage, limits: QuotaLimits) -> list[tuple[str, int, int]]:
    """``(field, asked, limit)`` for every dimension where the pod alone exceeds the limit."""
    over = []
    for field in _FIELDS:
        limit = getattr(limits, field)
        if limit is not None and getattr(totals, field) > limit:
            over.append((field, getattr(totals, field), limit))
    return over


class QuotaBook:
    """The GPU limits per namespace, kept current by a ResourceQuota list+watch.

    ``on_change(namespace, quota)`` is called whenever a namespace's limits change (None when
    it has none left), e.g. ``Ledger.set_quota``.
    """

    def __init__(
        self,
        names: ResourceNames,
        on_change: Callable[[str, NamespaceQuota | None], None] = lambda ns, q: None,
    ) -> None:
        self._names = names
        self._on_change = on_change
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._limits: dict[str, QuotaLimits] = {}

    def limits(self, namespace: str) -> QuotaLimits | None:
        with self._lock:
            return self._limits.get(namespace)

    def replace(self, items: list[dict[str, Any]]) -> None:
        by_namespace: dict[str, dict[str, Mapping[str, Any]]] = {}
        for item in items:
            namespace, name = _namespace(item), _name(item)
            by_namespace.setdefault(namespace, {})[name] = item
        with self._lock:
            touched = set(self._objects) | set(by_namespace)
            self._objects = by_namespace
        for namespace in sorted(touched):
            self._recompute(namespace)

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        namespace, name = _namespace(obj), _name(obj)
        with self._lock:
            objects = self._objects.setdefault(namespace, {})
            if event == "DELETED":
                objects.pop(name, None)
            else:
                objects[name] = obj
        self._recompute(namespace)

    def _recompute(self, namespace: str) -> None:
        with self._lock:
            limits = limits_from_quotas(self._objects.get(namespace, {}).values(), self._names)
            if limits == self._limits.get(namespace):
                return
            if limits is None:
                self._limits.pop(namespace, None)
            else:
                self._limits[namespace] = limits
        self._on_change(namespace, NamespaceQuota(limits=limits) if limits else None)


class QuotaTotals:
    """The extender's quota per namespace: the limits (a :class:`QuotaBook`'s ``on_change``)
    with what the namespace's DRA claims hold (a ``ClaimLedger``'s ``on_change``), booked
    together in the ledger as :class:`NamespaceQuota` (``used``: usage outside the pods the
    ledger records). So a bind counts the namespace's claims as the claims' allocation check
    counts its pods, and the two paths share one quota.

    ``set_quota`` is called under this object's lock, so the last call always carries the
    newest limits and claims total (lock order: this lock, then the ledger's).
    """

    def __init__(self, set_quota: Callable[[str, NamespaceQuota | None], None]) -> None:
        self._set_quota = set_quota
        self._lock = threading.Lock()
        self._quotas: dict[str, NamespaceQuota] = {}
        self._claims: dict[str, QuotaUsage] = {}

    def limits_changed(self, namespace: str, quota: NamespaceQuota | None) -> None:
        with self._lock:
            if quota is None:
                self._quotas.pop(namespace, None)
            else:
                self._quotas[namespace] = quota
            self._push(namespace)

    def claims_changed(self, namespace: str, total: QuotaUsage) -> None:
        with self._lock:
            if total == QuotaUsage():
                self._claims.pop(namespace, None)
            else:
                self._claims[namespace] = total
            self._push(namespace)

    def _push(self, namespace: str) -> None:
        quota = self._quotas.get(namespace)
        if quota is None:
            self._set_quota(namespace, None)
            return
        used = add_usage(quota.used, self._claims.get(namespace, QuotaUsage()))
        self._set_quota(namespace, NamespaceQuota(limits=quota.limits, used=used))


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
