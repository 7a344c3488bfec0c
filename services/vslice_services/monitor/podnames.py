"""Pod uid -> (namespace, name) for metric labels, refreshed from the API server.

Best effort by design: the region paths carry only the pod uid, names make the metrics
readable. Without API access the monitor still exports everything, with empty names, and
logs the reason once per distinct failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from vslice_core.errors import ClusterError

from vslice_services.deviceplugin.nodeapi import NodeApi

log = logging.getLogger("vslice.monitor.pods")
MIN_REFRESH_S = 1.0


class PodNames:
    def __init__(
        self,
        api: NodeApi,
        node: str,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
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
