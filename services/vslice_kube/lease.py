"""Leader election over a ``coordination.k8s.io/v1`` Lease, as kube-scheduler does it.

One replica of the extender is *active* (it holds the Lease and binds); the others stand by.
Because the active replica is the only one binding, it needs no per-node lock: a bind is one
API write (the Binding carrying the allocation annotations).

The rules, chosen so that two replicas can never both bind:

- **Acquire/renew** is a read followed by a create or a replace carrying the read's
  ``resourceVersion``: when anyone changed the Lease in between, the server answers 409 and
  the attempt fails. So at most one replica's renew succeeds for any version of the Lease.
- **Expiry is judged by the observer's own clock** (monotonic), never by the server's
  ``renewTime``: a standby takes the Lease over only when the holder's record has not changed
  for ``lease_seconds`` since the standby *saw* it change. Clocks of different machines never
  compare.
- **The holder stops early**: it counts itself active only until ``lease_seconds - margin``
  after the start of its last successful renew, where ``margin`` covers a bind's longest API
  call plus clock-rate slack. Any standby waits the full ``lease_seconds`` from a moment *after*
  that renew, so the holder's last bind has finished before anyone else may start one.
- **A lost Lease stops binds at once**: a renew that finds another holder (or fails past the
  deadline) ends the term there and then; a replica that stops cleanly gives the Lease up
  (empty holder) so a standby takes over without waiting.

Each acquisition starts a new *term* (a counter): the extender re-reads every pod before its
first bind of a term, because the previous holder's last binds may not have reached its
watch yet.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import cluster_error
from vslice_kube.responses import drained

__all__ = ["LeaderLease", "LeaseTiming"]

log = logging.getLogger("vslice.lease")


@dataclass(frozen=True)
class LeaseTiming:
    """``lease_seconds``: how long a silent holder keeps the Lease; ``renew_seconds``: how
    often the holder renews (and a standby retries); ``margin_seconds``: how long before the
    Lease could be taken over the holder stops binding (at least a bind's API timeout)."""

    lease_seconds: float = 15.0
    renew_seconds: float = 2.0
    margin_seconds: float = 6.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_seconds < self.lease_seconds - self.margin_seconds:
            raise ValueError(
                "leader election needs 0 < renew_seconds < lease_seconds - margin_seconds, got "
                f"renew_seconds={self.renew_seconds}, lease_seconds={self.lease_seconds}, "
                f"margin_seconds={self.margin_seconds}"
            )


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderLease:
    """Hold or wait for one Lease; :meth:`active` says whether this replica may bind now."""

    @classmethod
    def beside(
        cls, core: k8s.CoreV1Api, namespace: str, name: str, identity: str, timing: LeaseTiming
    ) -> LeaderLease:
        """A lease over the same connection as a CoreV1Api (services never build clients)."""
        return cls(k8s.CoordinationV1Api(core.api_client), namespace, name, identity, timing)

    def __init__(
        self,
        api: k8s.CoordinationV1Api,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        request_timeout: float = 5.0,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self.timing = timing or LeaseTiming()
        self._clock = clock
        self._timeout = request_timeout
        self._lock = threading.Lock()
        self._valid_until = 0.0  # monotonic: binds allowed before this
        self._term = 0
        self._holding = False
        # What this replica last saw of the Lease, and when (its own clock).
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_change: list[Callable[[bool], None]] = []

    # ----- reading ------------------------------------------------------------------------
    def active(self) -> bool:
        """True while this replica holds the Lease with time to spare for one more bind."""
        with self._lock:
            return self._holding and self._clock() < self._valid_until

    @property
    def term(self) -> int:
        """Counts acquisitions by this replica (a new term after every takeover)."""
        with self._lock:
            return self._term

    def on_change(self, callback: Callable[[bool], None]) -> None:
        """``callback(active)`` after every acquisition and loss (from the renew thread)."""
        self._on_change.append(callback)

    # ----- one attempt ----------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One read and at most one write; True when this replica holds the Lease now."""
        started = self._clock()
        try:
            lease = self._read()
            if lease is None:
                self._create()
                return self._won(started, new_term=True)
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            record = (holder, str(spec.get("renewTime") or ""))
            if record != self._observed:
                # Seen after the read returned: the holder's write came before, so waiting
                # lease_seconds from here never cuts its term short.
                self._observed, self._observed_at = record, self._clock()
            if holder and holder != self.identity:
                self._lose(f"held by {holder}")
                expired = self._clock() - self._observed_at >= self.timing.lease_seconds
                if not expired:
                    return False
            self._replace(lease, spec, holder)
            return self._won(started, new_term=holder != self.identity or not self._holding)
        except ClusterError as exc:
            if exc.code == 409:  # someone wrote the Lease between our read and write
                self._lose("changed by another replica")
                return False
            log.warning("lease renew failed", extra={"lease": self._name, "error": str(exc)})
            self._expire_if_due()
            return False

    def release(self) -> None:
        """Give the Lease up (empty holder) when this replica holds it, so a standby takes
        over at once; the replica stops binding first."""
        with self._lock:
            holding, self._holding, self._valid_until = self._holding, False, 0.0
        if not holding:
            return
        try:
            lease = self._read()
            spec = (lease or {}).get("spec") or {}
            if lease is not None and spec.get("holderIdentity") == self.identity:
                body = {**lease, "spec": {**spec, "holderIdentity": "", "renewTime": _now_text()}}
                self._call(
                    "give up the lease",
                    self._api.replace_namespaced_lease,
                    self._name,
                    self._namespace,
                    body,
                )
        except ClusterError as exc:
            log.warning("lease release failed", extra={"lease": self._name, "error": str(exc)})
        self._notify(False)

    # ----- the renew thread -------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timing.renew_seconds + self._timeout)
        self.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception:  # the thread must outlive any one failure
                log.exception("lease loop failed")
            self._stop.wait(self.timing.renew_seconds)

    # ----- internals --------------------------------------------------------------------------
    def _won(self, started: float, *, new_term: bool) -> bool:
        with self._lock:
            was = self._holding
            self._holding = True
            self._valid_until = started + self.timing.lease_seconds - self.timing.margin_seconds
            if new_term or not was:
                self._term += 1
            term = self._term
        if not was:
            log.info(
                "leading", extra={"lease": self._name, "identity": self.identity, "term": term}
            )
            self._notify(True)
        return True

    def _lose(self, why: str) -> None:
        with self._lock:
            was, self._holding, self._valid_until = self._holding, False, 0.0
        if was:
            log.warning("lease lost", extra={"lease": self._name, "why": why})
            self._notify(False)

    def _expire_if_due(self) -> None:
        """A renew that failed: keep binding only while the last good renew allows."""
        if not self.active():
            self._lose("could not renew in time")

    def _notify(self, active: bool) -> None:
        for callback in self._on_change:
            try:
                callback(active)
            except Exception:
                log.exception("lease callback failed")

    def _spec(self, acquire: str | None, transitions: int) -> dict[str, Any]:
        now = _now_text()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.timing.lease_seconds)),
            "acquireTime": acquire or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _read(self) -> dict[str, Any] | None:
        try:
            response: Any = self._api.read_namespaced_lease(
                self._name, self._namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise cluster_error(exc, f"read lease {self._namespace}/{self._name}") from None
        except (HTTPError, OSError) as exc:
            raise cluster_error(exc, f"read lease {self._namespace}/{self._name}") from None
        data: dict[str, Any] = json.loads(response.data)
        return data

    def _create(self) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": self._spec(None, 0),
        }
        self._call("create the lease", self._api.create_namespaced_lease, self._namespace, body)

    def _replace(self, lease: dict[str, Any], spec: dict[str, Any], holder: str) -> None:
        ours = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if ours else 1)
        acquire = str(spec.get("acquireTime")) if ours and spec.get("acquireTime") else None
        # metadata.resourceVersion is kept: a concurrent write makes this one fail (409).
        body = {**lease, "spec": self._spec(acquire, transitions)}
        self._call(
            "renew the lease", self._api.replace_namespaced_lease, self._name, self._namespace, body
        )

    def _call(self, what: str, method: Callable[..., Any], *args: Any) -> None:
        try:
            drained(method(*args, _preload_content=False, _request_timeout=self._timeout))
        except (ApiException, HTTPError, OSError) as exc:
            raise cluster_error(exc, f"{what} {self._namespace}/{self._name}") from None
