"""Pod uid -> (namespace, name) for metric labels, refreshed from the API server.

Best effort by design: the region paths carry only the pod uid (on the DRA path the claim
uid: the DRA driver's checkpoint names the claim, and the pods' ``resourceClaimStatuses`` the
pod that uses it), names make the metrics readable. Without API access the monitor still
exports everything, with empty names, and logs the reason once per distinct failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from vslice_core.errors import ClusterError

from vslice_node.nodeapi import NodeApi

log = logging.getLogger("vslice.monitor.pods")
MIN_REFRESH_S = 1.0


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
        self._names: dict[str, tuple[str, str]] = {}
        self._last_error = ""
        self._refreshed = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-names", daemon=True)

    def __call__(self, uids: Collection[str] = ()) -> dict[str, tuple[str, str]]:
        """The names known; a pod uid not among them (a pod newer than the last refresh) makes
        this call refresh first, at most once per ``MIN_REFRESH_S``, so a new pod's metrics
        carry its name at the first scrape."""
        now = self._clock()
        if set(uids) - self._names.keys() and now - self._refreshed >= MIN_REFRESH_S:
            self.refresh()
        return self._names

    def refresh(self) -> None:
        self._refreshed = self._clock()
        try:
            pods = self.api.pods_on_node(self.node)
        except ClusterError as exc:
            if str(exc) != self._last_error:
                log.warning("pod names unavailable", extra={"error": str(exc)})
            self._last_error = str(exc)
            return
        self._last_error = ""
        names = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            names[str(meta.get("uid", ""))] = (
                str(meta.get("namespace", "")),
                str(meta.get("name", "")),
            )
        names.update(claim_names(self.claims(), pods))
        self._names = names  # replaced whole: readers never see a half-built map

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.every_s)


def claim_names(
    claims: Mapping[str, tuple[str, str]], pods: Sequence[Mapping[str, Any]]
) -> dict[str, tuple[str, str]]:
    """Claim uid -> (namespace, pod name) for the prepared claims (the claim's own name when
    no pod on the node lists it yet)."""
    users: dict[tuple[str, str], str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            claim = entry.get("resourceClaimName") if isinstance(entry, Mapping) else None
            if claim:
                users.setdefault((namespace, str(claim)), str(meta.get("name", "")))
    return {
        uid: (namespace, users.get((namespace, name), name))
        for uid, (namespace, name) in claims.items()
    }
