"""A namespace's GPU quota on the DRA path: every allocated vslice claim counts, checked where
kube-scheduler writes the allocation.

kube-scheduler's DRA allocator knows nothing of vslice's quota (a ResourceQuota's
``requests.nvidia.com/gpumem``, ``gpucores``, ``gpu``: :mod:`vslice_control.quota`). It
writes a claim's ``status.allocation`` together with the pod's reservation in one UPDATE of
``resourceclaims/status`` before it binds the pod; a validating webhook rule sends the webhook
exactly those updates that newly give a claim a ``gpu.vslice.io`` device
(:mod:`vslice_control.webhook.reach`). There :func:`review_allocation` counts the claim the
way the extender counts a pod at bind time and the :class:`ClaimLedger` decides, under one
lock, whether the namespace's allocated claims plus this one stay within the quota; a claim
admitted is recorded in the same step, so of ten allocations arriving at once only as many as
fit get through, whatever the order. A refusal fails kube-scheduler's PreBind: the pod stays
pending with the message in its ``PodScheduled`` condition and ``FailedScheduling`` event,
and kube-scheduler tries again (it fits once another claim of the namespace is released).

What a claim counts, per allocation result of vslice's driver (one GPU slice each):

- memory: ``consumedCapacity.memory`` (kube-scheduler writes the request policy's default,
  the whole card, for a claim that asks none); a result without it takes the whole device
  (:class:`Cards`, from the ResourceSlices);
- cores: ``consumedCapacity.cores``; a result without consumed capacity at all takes the
  whole device (100), as on the node (:func:`vslice_core.dra.allocations.grants`);
- slices: one per result.

The ledger is the webhook's own memory of the allocated claims, filled by a list+watch of
ResourceClaims (``replace``/``apply``). A claim the webhook has just admitted is *held*: the
API server may still fail to store it (another admission check, a timeout), so the hold ends
when the watch shows the claim allocated (then it is counted as stored), deleted, changed
after the version that was judged without an allocation, or after ``hold_s``.

Lock order: the ledger's lock is the only lock here and nothing is called while it is held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vslice_core.dra import DRIVER, MIB, claim_label
from vslice_core.dra.allocations import shares
from vslice_core.dra.devices import device_name, inventory_from_slice
from vslice_core.errors import InvalidRequest
from vslice_core.model import EXCLUSIVE_CORES, QuotaLimits, QuotaUsage
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice_control.quota import exceeded
from vslice_control.webhook.review import ClaimAdmission, Verdict

log = logging.getLogger("vslice.webhook.claimquota")

QUOTA_EXCEEDED = "quota_exceeded"
"""Reason code of a refusal for quota (the pods' and the extender's code for the same)."""
NOT_COUNTED = "claims_not_listed"
"""Reason code of a refusal because the claims have not been listed yet."""
UNREADABLE = "status.allocation"
"""Reason code of an allocation the webhook cannot count."""
HOLD_S = 60.0
_UNITS = {
    "memory_mib": "MiB of GPU memory",
    "cores": "percent of a GPU's SMs",
    "gpus": "GPU slices",
}


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
    used: int
    limit: int


@dataclass
class ClaimLedger:
    """The allocated vslice claims of every namespace, and the one check-and-record step."""

    cards: Cards = field(default_factory=Cards)
    hold_s: float = HOLD_S
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _claims: dict[str, _Counted] = field(default_factory=dict, init=False)
    _synced: bool = field(default=False, init=False)

    @property
    def synced(self) -> bool:
        """Whether the claims have been listed once (before, nothing can be judged)."""
        with self._lock:
            return self._synced

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
            used = self._used(namespace, uid)
            over = _over(charge, used, limits)
            if not over:
                until = self.clock() + self.hold_s
                self._claims[uid] = _Counted(namespace, charge, version, until)
            return over

    def replace(self, items: list[dict[str, Any]]) -> None:
        counted = {}
        for item in items:
            entry = self._stored(item)
            if entry is not None:
                counted[_uid(item)] = entry
        versions = {_uid(item): _version(item) for item in items}
        with self._lock:
            for uid, entry in self._claims.items():
                held = entry.held_until is not None and uid not in counted
                if held and not _later(versions.get(uid, ""), entry.version):
                    counted[uid] = entry
            self._claims = counted
            self._synced = True

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        uid = _uid(obj)
        entry = None if event == "DELETED" else self._stored(obj)
        with self._lock:
            if entry is not None:
                self._claims[uid] = entry
                return
            known = self._claims.get(uid)
            if known is None:
                return
            # A hold outlives events of the version it judged (they predate the write) but
            # not a deletion or a later version that has no allocation (the write failed).
            stored = known.held_until is None
            if event == "DELETED" or stored or _later(_version(obj), known.version):
                del self._claims[uid]

    def _stored(self, claim: Mapping[str, Any]) -> _Counted | None:
        charge = _charge_or_none(claim, self.cards)
        if charge is None:
            return None
        return _Counted(_namespace(claim), charge, _version(claim))

    def _used(self, namespace: str, besides: str) -> QuotaUsage:
        memory = cores = gpus = 0
        for uid, entry in self._claims.items():
            if entry.namespace == namespace and uid != besides:
                memory += entry.usage.memory_mib
                cores += entry.usage.cores
                gpus += entry.usage.gpus
        return QuotaUsage(memory_mib=memory, cores=cores, gpus=gpus)

    def _expire(self) -> None:
        now = self.clock()
        for uid in [u for u, e in self._claims.items() if e.held_until and e.held_until < now]:
            del self._claims[uid]


def _over(charge: QuotaUsage, used: QuotaUsage, limits: QuotaLimits | None) -> list[Over]:
    if limits is None:
        return []
    total = QuotaUsage(
        memory_mib=used.memory_mib + charge.memory_mib,
        cores=used.cores + charge.cores,
        gpus=used.gpus + charge.gpus,
    )
    return [
        Over(name, getattr(charge, name), getattr(used, name), limit)
        for name, _, limit in exceeded(total, limits)
    ]


def allocates(request: ClaimAdmission) -> bool:
    """Whether the request newly gives a ResourceClaim a vslice device: the UPDATE of
    ``resourceclaims/status`` kube-scheduler makes when it allocates (only a status write can
    set an allocation; the API server keeps the stored status on a write of the claim)."""
    if request.kind != "ResourceClaim" or request.operation != "UPDATE":
        return False
    try:
        before = shares(request.old_claim) if request.old_claim is not None else []
        after = shares(request.claim)
    except InvalidRequest:
        return bool(_results(request.claim)) and not _results(request.old_claim or {})
    return bool(after) and not before


def _results(claim: Mapping[str, Any]) -> object:
    status = claim.get("status")
    return (status.get("allocation") if isinstance(status, Mapping) else None) or None


def review_allocation(
    request: ClaimAdmission,
    ledger: ClaimLedger,
    limits: QuotaLimits | None,
    names: ResourceNames = DEFAULT_RESOURCE_NAMES,
) -> Verdict:
    """Admit the allocation when the namespace's claims with it stay within its quota."""
    claim = _named(request)
    try:
        charge = claim_charge(claim, ledger.cards)
    except InvalidRequest as error:
        return Verdict.deny(str(error), code=400, reason=UNREADABLE)
    if limits is not None and not ledger.synced:
        return Verdict.deny(
            f"ResourceClaim {claim_label(claim)}: namespace {request.namespace!r} has a GPU "
            "quota and the webhook has not listed its ResourceClaims yet, so it cannot count "
            "what the namespace holds; kube-scheduler tries again",
            code=503,
            reason=NOT_COUNTED,
        )
    version = _version(request.old_claim or claim)
    over = ledger.admit(request.namespace, _uid(claim), charge, limits, version)
    if not over:
        return Verdict(allowed=True, reason="allocation")
    return Verdict.deny(over_message(claim, over[0], names), code=403, reason=QUOTA_EXCEEDED)


def over_message(claim: Mapping[str, Any], over: Over, names: ResourceNames) -> str:
    """The refusal: the claim, the field, the value, the limit and what fits now."""
    resource = {"memory_mib": names.memory, "cores": names.cores, "gpus": names.gpu}[over.field]
    unit = _UNITS[over.field]
    namespace = (claim.get("metadata") or {}).get("namespace", "?")
    left = max(0, over.limit - over.used)
    return (
        f"ResourceClaim {claim_label(claim)}: status.allocation.devices.results gives it "
        f"{over.asked} {unit}, and the other claims of namespace {namespace!r} already hold "
        f"{over.used}: {over.asked + over.used} in all, more than its quota allows (ResourceQuota "
        f"requests.{resource} = {over.limit}); {left} fits now, more once the namespace's other "
        "claims are released (their pods end)"
    )


def _named(request: ClaimAdmission) -> dict[str, Any]:
    metadata = dict(request.claim.get("metadata") or {})
    metadata.update(namespace=request.namespace, name=request.name or metadata.get("name", "?"))
    return {**request.claim, "metadata": metadata}


def _later(version: str, than: str) -> bool:
    # resourceVersions are opaque to clients, but every API server vslice supports writes
    # etcd revisions, which only grow; anything else never ends a hold early (hold_s does).
    return version.isdigit() and than.isdigit() and int(version) > int(than)


def _uid(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
