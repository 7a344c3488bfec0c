"""Pod uid -> (namespace, name) for metric labels, and which regions' pods have ended, refreshed
from the API server.

Best effort by design: the region paths carry only the pod uid (on the DRA path the claim
uid: the DRA driver's checkpoint names the claim, and the pods' ``resourceClaimStatuses`` the
pod that uses it), names make the metrics readable. Without API access the monitor still
exports everything, with empty names, and logs the reason once per distinct failure.

A region directory outlives its pod until the node agent's sweep removes it (a grace period
later), and a finished pod's region keeps the last values its shim wrote. Neither is use of a
GPU, so :class:`PodView` tells the collector which regions to leave out:

- the pod's phase is ``Succeeded`` or ``Failed`` (for a claim: every pod on the node that
  lists the claim has one of them);
- the uid is neither a pod on the node nor a prepared claim in a list taken *after* the
  monitor first saw the region. A region appears only once its pod exists (the device plugin
  or the DRA driver creates it for a pod the API server knows), so such a list would show the
  pod; a list taken before the region was first seen proves nothing: the pod may be newer.

When the latest list failed nothing is left out (the API server cannot say), as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vslice_core.clusterobjects import pod_finished
from vslice_core.errors import ClusterError

from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.monitor.pods")
MIN_REFRESH_S = 1.0


@dataclass(frozen=True)
class PodView:
    """What the monitor knows of the owners of the regions it is about to export."""

    names: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Pod or claim uid -> (namespace, pod name); a uid not in it is exported unnamed."""
    ended: frozenset[str] = frozenset()
    """Uids whose regions are not exported: the pod finished or no longer exists."""


PodLookup = Callable[[Collection[str]], PodView]
"""Given the uids of the regions found, what is known of them (:class:`PodNames`)."""


@dataclass(frozen=True)
class _Listing:
    """One successful list of the node's pods (and the prepared claims), replaced whole so a
    scrape never sees half of one refresh and half of another."""

    names: dict[str, tuple[str, str]]
    finished: frozenset[str]  # pod and claim uids whose pods ended
    at: float  # the clock when the list was asked for
    pods: tuple[dict[str, Any], ...] = ()  # the pods as listed (the idle reclaimer reads them)


class PodNames:
    def __init__(
        self,
        api: NodeApi,
        node: str,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
        claims: Callable[[], Mapping[str, tuple[str, str]]] = dict,
    ) -> None:
        self._clock = clock
        self.claims = claims
        self.api = api
        self.node = node
        self.every_s = every_s
        self._listing = _Listing({}, frozenset(), float("-inf"))
        self._current = False  # whether the latest list succeeded
        self._first_seen: dict[str, float] = {}
        self._seen_lock = threading.Lock()
        self._list_lock = threading.Lock()
        self._last_error = ""
        self._refreshed = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-names", daemon=True)

    def __call__(self, uids: Collection[str] = ()) -> PodView:
        """What is known of ``uids``. A uid that no list taken since its region was first seen
        can name (a pod newer than the last refresh) makes this call list first, so a new
        pod's metrics carry its name at the first scrape. Each such uid costs one list, not
        one per scrape; after a failed list, lists are at most once per ``MIN_REFRESH_S``.

        Lists are serialised: a scrape that arrives while another caller's list is in flight
        waits for it and lists again only if that one started before the region was seen.
        Without this, a second scrape (Prometheus and a person at once) returned the list
        from before the pod existed, unnamed."""
        now = self._clock()
        first_seen = self._remember(uids, now)
        if self._needs_list(first_seen, now):
            with self._list_lock:
                if self._needs_list(first_seen, self._clock()):
                    self.refresh()
        listing, current = self._listing, self._current
        if not current:
            return PodView(listing.names)
        ended = {
            uid
            for uid in uids
            if uid in listing.finished
            or (uid not in listing.names and first_seen[uid] <= listing.at)
        }
        return PodView(listing.names, frozenset(ended))

    def latest(self) -> tuple[tuple[dict[str, Any], ...], Mapping[str, tuple[str, str]]] | None:
        """The node's pods and the uid -> (namespace, pod) names of the latest list; None
        while the latest list failed (nothing may be decided on an old one)."""
        listing = self._listing
        return (listing.pods, listing.names) if self._current else None

    def _needs_list(self, first_seen: Mapping[str, float], now: float) -> bool:
        listing = self._listing
        if not self._current and now - self._refreshed < MIN_REFRESH_S:
            return False  # the API server just failed: do not ask it on every scrape
        return any(
            uid not in listing.names and seen > listing.at for uid, seen in first_seen.items()
        )

    def _remember(self, uids: Collection[str], now: float) -> dict[str, float]:
        """When each of ``uids`` was first asked about; uids no longer asked about are
        forgotten (their regions are gone: one that comes back is new)."""
        with self._seen_lock:
            self._first_seen = {uid: self._first_seen.get(uid, now) for uid in uids}
            return self._first_seen

    def refresh(self) -> None:
        started = self._refreshed = self._clock()
        try:
            pods = self.api.pods_on_node(self.node)
        except ClusterError as exc:
            if str(exc) != self._last_error:
                log.warning("pod names unavailable", extra={"error": str(exc)})
            self._last_error = str(exc)
            self._current = False
            return
        self._last_error = ""
        names = {}
        finished = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            names[uid] = (str(meta.get("namespace", "")), str(meta.get("name", "")))
            if pod_finished(pod):
                finished.add(uid)
        claims = self.claims()
        names.update(claim_names(claims, pods))
        finished |= claims_of_finished_pods(claims, pods)
        self._listing = _Listing(names, frozenset(finished), started, tuple(pods))
        self._current = True

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._list_lock:
                self.refresh()
            self._stop.wait(self.every_s)


def _claim_users(
    pods: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """(namespace, claim name) -> the pods whose ``resourceClaimStatuses`` list the claim."""
    users: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for pod in pods:
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            claim = entry.get("resourceClaimName") if isinstance(entry, Mapping) else None
            if claim:
                users.setdefault((namespace, str(claim)), []).append(pod)
    return users


def claim_names(
    claims: Mapping[str, tuple[str, str]], pods: Sequence[Mapping[str, Any]]
) -> dict[str, tuple[str, str]]:
    """Claim uid -> (namespace, pod name) for the prepared claims (the claim's own name when
    no pod on the node lists it yet)."""
    users = _claim_users(pods)
    named = {}
    for uid, (namespace, name) in claims.items():
        first = users.get((namespace, name))
        pod = str((first[0].get("metadata") or {}).get("name", "")) if first else name
        named[uid] = (namespace, pod)
    return named


def claims_of_finished_pods(
    claims: Mapping[str, tuple[str, str]], pods: Sequence[Mapping[str, Any]]
) -> set[str]:
    """The prepared claims whose pods on the node all ended (a claim no pod lists yet is in
    use by a pod being started, not ended)."""
    users = _claim_users(pods)
    return {
        uid
        for uid, key in claims.items()
        if users.get(key) and all(pod_finished(pod) for pod in users[key])
    }
