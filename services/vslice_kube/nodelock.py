"""The node lock: the ``vslice.io/node-lock`` annotation that serializes binds to one node.

Several extender replicas may bind to the same node. Whoever holds a node's lock is the only
one binding there, and re-checks the node's usage before it books anything.

- **Acquire**: read the node; when the lock is free (released or expired), malformed, or our
  own, write ``{holder, expires}`` with a merge patch that carries the node's
  ``resourceVersion``: if anyone changed the node in between, the server answers 409 and we
  read again. Two replicas can therefore never both believe they hold it.
- **Release**: one JSON Patch that first *tests* that the annotation still holds our exact
  value, then replaces it with a *released* marker (our name, expiry at the epoch). A lock
  that expired and was taken over is left alone.
- **Fast path**: the next acquire by the same replica tests for its own released marker and
  swaps in a new lock in one call. When that works, nobody else held the lock since our last
  release, so nobody else can have booked anything there meanwhile: ``Held.others_since``
  is False and the caller may skip re-reading the node's pods.
- A crashed holder blocks the node for at most the TTL (seconds, not minutes). A lock whose
  expiry lies further ahead than now + the TTL was not written by a replica with this TTL
  (a hand-written lock "until 2100", a broken clock): it is treated as expired, so it can
  never stop binds for longer than the TTL either.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from kubernetes import client as k8s
from vslice_core.annotations import NODE_LOCK, NodeLock, decode_node_lock, encode_node_lock
from vslice_core.errors import ClusterError, DecodeError

from vslice_kube.apierrors import translated
from vslice_kube.responses import drained

__all__ = ["Held", "LockBusy", "NodeLocker"]

log = logging.getLogger("vslice.nodelock")

REQUEST_TIMEOUT_S = 10.0
RELEASED = datetime(1970, 1, 1, tzinfo=UTC)
# Replicas' clocks differ a little; a lock this far beyond now + TTL is still honoured.
_CLOCK_SLACK = timedelta(seconds=2)
_POINTER = "/metadata/annotations/" + NODE_LOCK.replace("~", "~0").replace("/", "~1")


class LockBusy(ClusterError):
    """Another holder kept the node lock for longer than we were willing to wait."""


@dataclass(frozen=True)
class Held:
    node: str
    value: str
    others_since: bool
    """True unless this replica was also the previous holder (then nobody else booked since)."""
    renew_after: float = 0.0
    """``time.monotonic()`` after which half the TTL is gone: keep it no longer, renew it."""


def _now() -> datetime:
    return datetime.now(UTC)


class NodeLocker:
    def __init__(
        self,
        api: k8s.CoreV1Api,
        holder: str,
        *,
        ttl_seconds: float = 15.0,
        wait_seconds: float = 3.0,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._api = api
        self.holder = holder
        self._ttl = timedelta(seconds=ttl_seconds)
        self._wait = wait_seconds
        self._clock = clock
        self._released: dict[str, str] = {}  # node -> the released marker we last wrote
        self._guard = threading.Lock()

    def acquire(self, node: str) -> Held:
        """Take the lock, waiting up to ``wait_seconds`` for another holder."""
        renew_after = time.monotonic() + self._ttl.total_seconds() / 2
        fresh = self._fresh_value()
        with self._guard:
            marker = self._released.pop(node, None)
        if marker is not None and self._swap(node, marker, fresh):
            return Held(node, fresh, others_since=False, renew_after=renew_after)
        deadline = time.monotonic() + self._wait
        while True:
            current, version = self._read(node)
            if current is None or current.holder == self.holder or self._stale(node, current):
                renew_after = time.monotonic() + self._ttl.total_seconds() / 2
                fresh = self._fresh_value()
                if self._write(node, fresh, version):
                    mine = current is not None and current.holder == self.holder
                    return Held(node, fresh, others_since=not mine, renew_after=renew_after)
            if time.monotonic() >= deadline:
                holder = current.holder if current else "?"
                raise LockBusy(f"node {node} is locked by {holder}; gave up after {self._wait}s")
            time.sleep(random.uniform(0.005, 0.03))

    def release(self, held: Held) -> None:
        marker = encode_node_lock(NodeLock(holder=self.holder, expires=RELEASED))
        if self._swap(held.node, held.value, marker):
            with self._guard:
                self._released[held.node] = marker
        else:
            # Expired and taken over, or unreachable: the TTL frees it in any case.
            log.warning("node lock was not ours to release", extra={"node": held.node})

    def _stale(self, node: str, lock: NodeLock) -> bool:
        """Expired, or expiring beyond what any holder with this TTL could have written."""
        now = self._clock()
        if lock.expired(now):
            return True
        if lock.expires > now + self._ttl + _CLOCK_SLACK:
            log.warning(
                "node lock expires beyond the lock TTL; treated as expired",
                extra={"node": node, "holder": lock.holder, "expires": lock.expires.isoformat()},
            )
            return True
        return False

    def _fresh_value(self) -> str:
        return encode_node_lock(NodeLock(holder=self.holder, expires=self._clock() + self._ttl))

    def _swap(self, node: str, expected: str, value: str) -> bool:
        """Replace the lock value if it is still ``expected`` (one call); False otherwise."""
        patch = [
            {"op": "test", "path": _POINTER, "value": expected},
            {"op": "replace", "path": _POINTER, "value": value},
        ]
        try:
            # A list body is sent as a JSON Patch (a dict would be a merge patch).
            self._patch(node, patch, f"swap lock on node {node}")
        except ClusterError as exc:
            if exc.code not in (409, 422):  # 422: the test failed, the value changed
                log.warning("node lock call failed", extra={"node": node, "error": str(exc)})
            return False
        return True

    def _read(self, node: str) -> tuple[NodeLock | None, str]:
        with translated(f"read node {node}"):
            response: Any = self._api.read_node(
                node, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
        metadata: dict[str, Any] = json.loads(response.data).get("metadata") or {}
        version = str(metadata.get("resourceVersion", ""))
        value = (metadata.get("annotations") or {}).get(NODE_LOCK)
        if not value:
            return None, version
        try:
            return decode_node_lock(value), version
        except DecodeError as exc:
            # Written by someone else; it cannot be honoured, so it is treated as free.
            log.warning("malformed node lock replaced", extra={"node": node, "error": str(exc)})
            return None, version

    def _write(self, node: str, value: str, version: str) -> bool:
        body = {"metadata": {"resourceVersion": version, "annotations": {NODE_LOCK: value}}}
        try:
            self._patch(node, body, f"lock node {node}")
        except ClusterError as exc:
            if exc.code == 409:  # the node changed since we read it: read again
                return False
            raise
        return True

    def _patch(self, node: str, body: object, what: str) -> None:
        with translated(what):
            drained(
                self._api.patch_node(
                    node,
                    cast(Any, body),
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT_S,
                )
            )
