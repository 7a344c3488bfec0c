"""Pod uid -> (namespace, name) for metric labels, refreshed from the API server.

Best effort by design: the region paths carry only the pod uid, names make the metrics
readable. Without API access the monitor still exports everything, with empty names, and
logs the reason once per distinct failure.
"""

from __future__ import annotations

import logging
import threading

from vslice_core.errors import ClusterError

from vslice_services.deviceplugin.nodeapi import NodeApi

log = logging.getLogger("vslice.monitor.pods")


class PodNames:
    def __init__(self, api: NodeApi, node: str, every_s: float) -> None:
        self.api = api
        self.node = node
        self.every_s = every_s
        self._names: dict[str, tuple[str, str]] = {}
        self._last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-names", daemon=True)

    def __call__(self) -> dict[str, tuple[str, str]]:
        return self._names

    def refresh(self) -> None:
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
