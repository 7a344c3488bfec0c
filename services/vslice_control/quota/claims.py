"""What allocated vslice claims hold per namespace, for the quota on both paths.

kube-scheduler's DRA allocator knows nothing of vslice's quota (a ResourceQuota's
``requests.nvidia.com/gpumem``, ``gpucores``, ``gpu``: :mod:`vslice_control.quota.limits`).
Both deciders count the namespace's allocated claims from a list+watch of ResourceClaims
(``replace``/``apply``) and of vslice's ResourceSlices (:class:`Cards`):

- the webhook, where kube-scheduler writes a claim's allocation: :meth:`ClaimLedger.admit`
  checks the claim against the quota with everything else the namespace holds (its other
  claims, and its extender-path pods through ``others``, :mod:`vslice_control.quota.pods`)
  and holds it, in one step (:mod:`vslice_control.webhook.claimquota`);
- the extender, at bind time: ``on_change`` hands each namespace's claim total to
  :class:`vslice_control.quota.limits.QuotaTotals`, which books it in the ledger as usage
  outside its own pods.

What a claim counts, per allocation result of vslice's driver (one GPU slice each):

- memory: ``consumedCapacity.memory`` (kube-scheduler writes the request policy's default,
  the whole card, for a claim that asks none); a result without it takes the whole device
  (:class:`Cards`, from the ResourceSlices);
- cores: ``consumedCapacity.cores``; a result without consumed capacity at all takes the
  whole device (100), as on the node (:func:`vslice_core.dra.allocations.grants`);
- slices: one per result.

A claim the webhook has just admitted is *held*: the API server may still fail to store it
(another admission check, a timeout), so the hold ends when the watch shows the claim
allocated (then it is counted as stored), deleted, changed after the version that was judged
without an allocation, or after ``hold_s``.

Lock order: the ledger's lock, then the lock of ``others`` (a book that calls nothing back)
or of ``on_change``'s receiver (called under the ledger's lock, so the totals it gets arrive in
the order they were reached); neither calls the ledger.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from vslice_core.dra import DRIVER, MIB, claim_label
from vslice_core.dra.allocations import shares
from vslice_core.dra.devices import device_name, inventory_from_slice
from vslice_core.errors import InvalidRequest
from vslice_core.model import EXCLUSIVE_CORES, QuotaLimits, QuotaUsage

from vslice_control.quota.limits import add_usage, exceeded

log = logging.getLogger("vslice.quota.claims")

HOLD_S = 60.0
NOTHING = QuotaUsage()


class Others(Protocol):
    """What a namespace holds besides its claims (:class:`vslice_control.quota.pods.PodUsage`)."""

    @property
    def synced(self) -> bool: ...

    def used(self, namespace: str) -> QuotaUsage: ...


class NoOthers:
    """Nothing besides the claims (the extender: its ledger counts its pods itself)."""

    synced = True

    def used(self, namespace: str) -> QuotaUsage:
        return NOTHING


class Cards:
    """The memory of every vslice device, by pool and device, kept current by a list+watch of
    ``gpu.vslice.io`` ResourceSlices."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, dict[tuple[str, str], int]] = {}

    def size_mib(self, pool: str, device: str) -> int | None:
        with self._lock:
            for devices in self._slices.values():
                if (pool, device) in devices:
                    return devices[(pool, device)]
        return None

    def smallest_and_largest(self) -> tuple[int, int] | None:
        """The smallest and the largest card listed (None: no vslice device is listed)."""
        with self._lock:
            sizes = [size for devices in self._slices.values() for size in devices.values()]
        return (min(sizes), max(sizes)) if sizes else None

    def replace(self, items: list[dict[str, Any]]) -> None:
        found = {_name(item): _devices(item) for item in items}
        with self._lock:
            self._slices = found

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        devices = {} if event == "DELETED" else _devices(obj)
        with self._lock:
            self._slices[_name(obj)] = devices


def _devices(published: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    spec = published.get("spec") or {}
    if spec.get("driver") != DRIVER:
        return {}
    pool = str((spec.get("pool") or {}).get("name") or spec.get("nodeName") or "")
    try:
        inventory = inventory_from_slice(published)
    except InvalidRequest as error:
        # Someone else wrote the slice: its devices cannot be sized, and a claim given one
        # without consumed memory is then refused rather than counted as nothing.
        log.warning("unreadable ResourceSlice", extra={"error": str(error)})
        return {}
    return {(pool, device_name(gpu)): gpu.memory_mib for gpu in inventory.gpus}


def claim_charge(claim: Mapping[str, Any], cards: Cards) -> QuotaUsage:
    """What an allocated claim counts against its namespace's quota (module docstring).

    Raises :class:`InvalidRequest` naming the claim and the field for an allocation that
    cannot be read or a device whose size is unknown."""
    memory = cores = gpus = 0
    for i, share in enumerate(shares(claim)):
        if share.memory_bytes is not None:
            memory += -(-share.memory_bytes // MIB)
        else:
            memory += _whole_card(claim, i, share.pool, share.device, cards)
        whole = share.memory_bytes is None and share.cores is None
        cores += EXCLUSIVE_CORES if whole else (share.cores or 0)
        gpus += 1
    return QuotaUsage(memory_mib=memory, cores=cores, gpus=gpus)


def _whole_card(claim: Mapping[str, Any], i: int, pool: str, device: str, cards: Cards) -> int:
    size = cards.size_mib(pool, device)
    if size is None:
        where = f"status.allocation.devices.results[{i}]"
        raise InvalidRequest(
            f"ResourceClaim {claim_label(claim)}: {where} gives device {pool}/{device} without "
            f"consumedCapacity.memory, and no {DRIVER} ResourceSlice lists that device, so its "
            "memory cannot be counted against the namespace's quota",
            field=f"{where}.device",
            value=device,
        )
    return size


def _charge_or_none(claim: Mapping[str, Any], cards: Cards) -> QuotaUsage | None:
    """The charge of a claim the watch shows (None: no vslice device allocated)."""
    try:
        if not shares(claim):
            return None
        return claim_charge(claim, cards)
    except InvalidRequest as error:
        # Tenants cannot write a claim's status; an allocation kube-scheduler wrote that still
        # does not read back is counted as the largest card per device, never as nothing.
        log.warning("allocated claim not counted exactly", extra={"error": str(error)})
        return _largest_per_device(claim, cards)


def _largest_per_device(claim: Mapping[str, Any], cards: Cards) -> QuotaUsage:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    listed = results.get("results") if isinstance(results, Mapping) else None
    count = max(1, len(listed) if isinstance(listed, list) else 1)
    span = cards.smallest_and_largest()
    largest = span[1] if span else 0
    return QuotaUsage(memory_mib=count * largest, cores=count * EXCLUSIVE_CORES, gpus=count)


@dataclass
class _Counted:
    namespace: str
    usage: QuotaUsage
    version: str
    """The claim's resourceVersion: the stored one, or for a hold the one that was judged."""
    held_until: float | None = None
    """For a claim admitted but not yet seen stored: when the hold ends; None once stored."""


@dataclass(frozen=True)
class Over:
    """One dimension where the claim would take the namespace past its quota."""

    field: str  # a QuotaLimits field
    asked: int
    used: int  # all the namespace holds besides this claim
    limit: int
    pods: int = 0  # the part of ``used`` its extender-path pods hold


@dataclass
class ClaimLedger:
    """The allocated vslice claims of every namespace, and the one check-and-record step.

    ``others``: what each namespace holds besides its claims (the webhook: its extender-path
    pods), counted by :meth:`admit` and in :class:`Over`. ``on_change(namespace,
    total)``: called whenever the claims' total of a namespace changes (the extender books it).
    """

    cards: Cards = field(default_factory=Cards)
    hold_s: float = HOLD_S
    clock: Callable[[], float] = time.monotonic
    others: Others = field(default_factory=NoOthers)
    on_change: Callable[[str, QuotaUsage], None] = lambda namespace, total: None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _claims: dict[str, _Counted] = field(default_factory=dict, init=False)
    _reported: dict[str, QuotaUsage] = field(default_factory=dict, init=False)
    _synced: bool = field(default=False, init=False)

    @property
    def synced(self) -> bool:
        """Whether the claims (and ``others``) have been listed once (before, nothing can be
        judged)."""
        with self._lock:
            return self._synced and self.others.synced

    def used(self, namespace: str, *, besides: str = "") -> QuotaUsage:
        """What the namespace's allocated and held claims take (``besides``: one left out)."""
        with self._lock:
            return self._used(namespace, besides)

    def admit(
        self, namespace: str, uid: str, charge: QuotaUsage, limits: QuotaLimits | None, version: str
    ) -> list[Over]:
        """Check the claim against the quota and, when it fits, hold it, in one step.

        Returns what it would exceed (empty: admitted and held). The claim's own earlier entry
        is left out: the API server calls again for the same write when it retries it."""
        with self._lock:
            self._expire()
            pods = self.others.used(namespace)
            over = _over(charge, add_usage(self._used(namespace, uid), pods), limits, pods)
            if not over:
                until = self.clock() + self.hold_s
                self._claims[uid] = _Counted(namespace, charge, version, until)
                self._report({namespace})
            return over

    def replace(self, items: list[dict[str, Any]]) -> None:
        counted = {}
        for item in items:
            entry = self._stored(item)
            if entry is not None:
                counted[claim_uid(item)] = entry
        versions = {claim_uid(item): claim_version(item) for item in items}
        with self._lock:
            for uid, entry in self._claims.items():
                held = entry.held_until is not None and uid not in counted
                if held and not _later(versions.get(uid, ""), entry.version):
                    counted[uid] = entry
            touched = {e.namespace for e in self._claims.values()}
            touched |= {e.namespace for e in counted.values()}
            self._claims = counted
            self._synced = True
            self._report(touched)

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        uid = claim_uid(obj)
        entry = None if event == "DELETED" else self._stored(obj)
        with self._lock:
            known = self._claims.get(uid)
            if entry is not None:
                self._claims[uid] = entry
                self._report({entry.namespace} | ({known.namespace} if known else set()))
                return
            if known is None:
                return
            # A hold outlives events of the version it judged (they predate the write) but
            # not a deletion or a later version that has no allocation (the write failed).
            stored = known.held_until is None
            if event == "DELETED" or stored or _later(claim_version(obj), known.version):
                del self._claims[uid]
                self._report({known.namespace})

    def _stored(self, claim: Mapping[str, Any]) -> _Counted | None:
        charge = _charge_or_none(claim, self.cards)
        if charge is None:
            return None
        return _Counted(_namespace(claim), charge, claim_version(claim))

    def _used(self, namespace: str, besides: str) -> QuotaUsage:
        total = NOTHING
        for uid, entry in self._claims.items():
            if entry.namespace == namespace and uid != besides:
                total = add_usage(total, entry.usage)
        return total

    def _expire(self) -> None:
        now = self.clock()
        ended = [u for u, e in self._claims.items() if e.held_until and e.held_until < now]
        touched = {self._claims[uid].namespace for uid in ended}
        for uid in ended:
            del self._claims[uid]
        self._report(touched)

    def _report(self, namespaces: set[str]) -> None:
        """Hand ``on_change`` the new total of each namespace whose total changed."""
        for namespace in sorted(namespaces):
            total = self._used(namespace, "")
            if total != self._reported.get(namespace, NOTHING):
                if total == NOTHING:
                    self._reported.pop(namespace, None)
                else:
                    self._reported[namespace] = total
                self.on_change(namespace, total)


def _over(
    charge: QuotaUsage, used: QuotaUsage, limits: QuotaLimits | None, pods: QuotaUsage
) -> list[Over]:
    if limits is None:
        return []
    total = add_usage(used, charge)
    return [
        Over(name, getattr(charge, name), getattr(used, name), limit, getattr(pods, name))
        for name, _, limit in exceeded(total, limits)
    ]


def _later(version: str, than: str) -> bool:
    # resourceVersions are opaque to clients, but every API server vslice supports writes
    # etcd revisions, which only grow; anything else never ends a hold early (hold_s does).
    return version.isdigit() and than.isdigit() and int(version) > int(than)


def claim_uid(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")


def claim_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
