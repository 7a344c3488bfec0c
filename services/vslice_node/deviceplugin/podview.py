"""This node's pods, kept current by list and watch, so Allocate needs no list of its own.

One thread lists the pods bound to the node, then watches from the list's resourceVersion and
applies every change. It lists again when the server answers 410 Gone (the resourceVersion
was compacted away), after any other failure (with backoff, 0.5 s doubling to 30 s), and
every ``resync_s`` so a missed event never stays missed for long. A restarted agent starts
from a list, like any relist.

:meth:`PodView.snapshot` is what Allocate reads: the pods as last seen, or None while the view
cannot be trusted (before the first list, and from a failure until the next list succeeds);
the caller then lists for itself, as it did before the view existed. A pod the watch has not
shown yet (the kubelet can call Allocate right after the binding, before our watch delivers
it) is the caller's to notice; :meth:`PodView.fresh_list` lists now and keeps the pods that
list found and the view lacks (*overlay*), until the watch shows them, a later list
supersedes them or ``overlay_s`` passes, so the next call for the same pod finds it without
another list.

Snapshots say what a missing pod means (:class:`PodSnapshot`): ``listed_at`` is when the
newest full list behind it started, ``gone`` the pods the watch has seen deleted since. A
pod known to exist before ``listed_at`` and absent now is gone; one absent from a snapshot
whose list is older than what the caller knows may simply not have been seen yet. What the
watch shows only moves forward in time (events arrive in order, a relist is newer still), so
a conclusion drawn from it holds for every later snapshot; a fresh list, and the overlay, may
be newer than the watch and are therefore never used to settle anything (``fresh``,
``overlay``).

The view's lock guards its dicts only; no API call is made while it is held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vslice_core.errors import ClusterError

from vslice_node.nodeapi import EXPIRED, NodeApi, PodWatch

log = logging.getLogger("vslice.deviceplugin.podview")

WATCH_S = 240.0  # one watch request; the server ends it, and the next starts where it ended
RESYNC_S = 300.0
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
OVERLAY_S = 60.0


@dataclass(frozen=True)
class PodSnapshot:
    """The pods of the node at one moment, as plain dicts."""

    pods: tuple[Mapping[str, Any], ...]
    listed_at: float
    """Monotonic time at which the newest full list behind these pods was started."""
    gone: frozenset[str] = frozenset()
    """UIDs of pods the watch saw deleted after that list."""
    fresh: bool = False
    """True: a list made for this caller, not the watched view."""
    overlay: frozenset[str] = frozenset()
    """UIDs of pods in ``pods`` that come from a fresh list, not from the watch."""

    def uids(self) -> set[str]:
        return {uid_of(pod) for pod in self.pods}

    def names(self) -> set[tuple[str, str]]:
        return {name_of(pod) for pod in self.pods}


def uid_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def name_of(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


class PodView:
    def __init__(
        self,
        api: NodeApi,
        node: str,
        *,
        resync_s: float = RESYNC_S,
        watch_s: float = WATCH_S,
        backoff_s: float = BACKOFF_S,
        overlay_s: float = OVERLAY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.node = node
        self.resync_s = resync_s
        self.watch_s = watch_s
        self.backoff_s = backoff_s
        self.overlay_s = overlay_s
        self._clock = clock
        self._lock = threading.Lock()
        self._pods: dict[str, Mapping[str, Any]] = {}  # uid -> pod, as the watch shows it
        self._overlay: dict[str, tuple[float, Mapping[str, Any]]] = {}  # uid -> (listed, pod)
        self._gone: set[str] = set()
        self._listed_at = 0.0
        self._trusted = False  # listed, and no failure since
        self._state = "not started"
        self._stream: PodWatch | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Fresh lists asked for at once share one call (see fresh_list); guarded by _rounds.
        self._rounds = threading.Condition(threading.Lock())
        self._started_round = 0
        self._listing = False
        self._last_round: tuple[int, PodSnapshot | ClusterError] | None = None
        self.lists = 0  # full lists of the watch loop (not fresh_list)
        self.fresh_lists = 0  # list calls fresh_list made
        self.events = 0

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-view", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def state(self) -> str:
        """For /status: ``watching (<n> pods)``, ``not started``, ``listing`` or
        ``failing: <reason>``."""
        with self._lock:
            if self._trusted:
                return f"watching ({len(self._pods)} pods)"
            return self._state

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._list()
                failures = 0
                self._watch_until_resync(version)
            except ClusterError as exc:
                if self._stop.is_set():
                    return
                if exc.code == EXPIRED:
                    # Not a failure: the view stays trusted while the next list runs.
                    log.info("pod watch expired; listing again", extra={"node": self.node})
                    continue
                failures += 1
                self._distrust(exc, failures)
            except Exception as exc:  # the view must outlive any one failure
                if self._stop.is_set():
                    return
                log.exception("pod view failed", extra={"node": self.node})
                failures += 1
                self._distrust(exc, failures)

    def _distrust(self, exc: Exception, failures: int) -> None:
        delay = min(self.backoff_s * 2 ** min(failures - 1, 10), MAX_BACKOFF_S)
        with self._lock:
            self._trusted = False  # events may have been missed: callers list for themselves
            self._state = f"failing: {exc}"
        log.warning(
            "pod watch failed; listing again",
            extra={"node": self.node, "error": str(exc), "retry_in_s": delay},
        )
        self._stop.wait(delay)

    def _list(self) -> str:
        started = self._clock()
        with self._lock:
            if not self._trusted:
                self._state = "listing"
        pods, version = self.api.list_pods_on_node(self.node)
        with self._lock:
            self._pods = {uid_of(pod): pod for pod in pods}
            self._gone = set()
            self._listed_at = started
            # A fresh list made before this one says nothing this one does not.
            self._overlay = {
                uid: entry for uid, entry in self._overlay.items() if entry[0] > started
            }
            self._trusted = True
            self.lists += 1
        return version

    def _watch_until_resync(self, version: str) -> None:
        deadline = self._clock() + self.resync_s
        while not self._stop.is_set():
            left = deadline - self._clock()
            if left <= 0:
                return
            stream = self.api.watch_pods_on_node(self.node, version, min(self.watch_s, left))
            with self._lock:
                self._stream = stream
            if self._stop.is_set():  # stop() came before the stream was there to close
                stream.close()
            try:
                for kind, pod in stream:
                    version = str((pod.get("metadata") or {}).get("resourceVersion") or version)
                    self._apply(kind, pod)
            finally:
                with self._lock:
                    self._stream = None
                stream.close()

    def _apply(self, kind: str, pod: Mapping[str, Any]) -> None:
        uid = uid_of(pod)
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not uid:
            return  # BOOKMARK: only its resourceVersion counts
        with self._lock:
            self.events += 1
            self._overlay.pop(uid, None)  # the watch has caught up with this pod
            if kind == "DELETED":
                self._pods.pop(uid, None)
                self._gone.add(uid)
            else:
                self._pods[uid] = pod

    # -- what callers read ---------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        with self._lock:
            return self._trusted

    def snapshot(self) -> PodSnapshot | None:
        """The node's pods as watched (plus the overlay), or None when not to be trusted."""
        now = self._clock()
        with self._lock:
            if not self._trusted:
                return None
            pods = dict(self._pods)
            overlay = set()
            for uid, (listed, pod) in list(self._overlay.items()):
                if now - listed > self.overlay_s:
                    del self._overlay[uid]  # never seen by the watch: it went meanwhile
                elif uid not in pods and uid not in self._gone:
                    pods[uid] = pod
                    overlay.add(uid)
            return PodSnapshot(
                tuple(pods.values()),
                self._listed_at,
                frozenset(self._gone),
                overlay=frozenset(overlay),
            )

    def fresh_list(self) -> PodSnapshot:
        """The node's pods as listed by a call that started after this one was made
        (ClusterError when the API server fails); pods the view lacks are kept in the overlay
        for the next callers.

        Callers that ask while a list is running wait for it to end and then share the next
        one: a list that started before a caller asked might miss the very pod it looks for,
        one that started after cannot. A burst of calls that all miss the view costs two
        lists, not one each. The API call is made without holding any lock."""
        with self._rounds:
            need = self._started_round + 1  # the first round to start after this call
            while True:
                last = self._last_round
                if last is not None and last[0] >= need:
                    if isinstance(last[1], ClusterError):
                        raise last[1]
                    return last[1]
                if not self._listing:
                    break
                self._rounds.wait()
            self._listing = True
            self._started_round += 1
            mine = self._started_round
        result: PodSnapshot | ClusterError
        try:
            result = self._list_now()
        except ClusterError as exc:
            result = exc  # the waiters of this round get the same error
        except BaseException:
            with self._rounds:  # no result: a waiter starts the next round itself
                self._listing = False
                self._rounds.notify_all()
            raise
        with self._rounds:
            self._listing = False
            self._last_round = (mine, result)
            self._rounds.notify_all()
        if isinstance(result, ClusterError):
            raise result
        return result

    def _list_now(self) -> PodSnapshot:
        started = self._clock()
        self.fresh_lists += 1
        pods, _ = self.api.list_pods_on_node(self.node)
        with self._lock:
            if self._trusted:
                for pod in pods:
                    uid = uid_of(pod)
                    if uid and uid not in self._pods and uid not in self._gone:
                        self._overlay[uid] = (started, pod)
        return PodSnapshot(tuple(pods), started, fresh=True)
