"""Leader election for the extender, against the lab's real API server.

The Lease rules (:mod:`vslice_kube.lease`) are checked with a clock the test moves, so the
expiry arithmetic is exact and the test does not wait; the replicas are then checked as
processes: only the active one binds, a killed active replica is replaced within the lease
time and nothing it booked is booked twice, and a replica whose Lease is taken stops binding
at once. Every "never double-booked" check reads the API server (``audit``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import LabHandle
from extender_processes import ExtenderProcess, audit, extender_process, free_slices, wait_until
from kubernetes import client as k8s
from test_extender_lab import (
    SLICE_CORES,
    SLICE_MIB,
    _assert_every_bound_pod_has_its_allocation,
    _bound,
    _create_many,
    _pods,
    emptied,
)
from vslice_kube.lease import LeaderLease, LeaseTiming

pytestmark = pytest.mark.timeout(300)
__all__ = ["emptied"]  # the fixture, shared with the node-lock tests

TIMING = LeaseTiming(lease_seconds=3.0, renew_seconds=0.5, margin_seconds=1.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def coordination(services: LabHandle) -> k8s.CoordinationV1Api:
    return k8s.CoordinationV1Api(services.core.api_client)


def _lease(api: k8s.CoordinationV1Api, namespace: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        api.read_namespaced_lease(name, namespace, _preload_content=False).data
    )
    return data


def _pair(
    api: k8s.CoordinationV1Api, namespace: str, clock: Clock
) -> tuple[LeaderLease, LeaderLease]:
    return (
        LeaderLease(api, namespace, "lease", "replica-a", TIMING, clock=clock),
        LeaderLease(api, namespace, "lease", "replica-b", TIMING, clock=clock),
    )


def test_one_replica_holds_the_lease_and_a_standby_waits_the_full_lease_time(
    coordination: k8s.CoordinationV1Api, namespace: str
) -> None:
    clock = Clock()
    a, b = _pair(coordination, namespace, clock)
    assert a.try_acquire_or_renew() and a.active() and a.term == 1
    assert not b.try_acquire_or_renew() and not b.active()  # b saw a's record now
    # a stops binding margin_seconds before anyone may take over...
    clock.now += TIMING.lease_seconds - TIMING.margin_seconds - 0.01
    assert a.active()
    clock.now += 0.02
    assert not a.active()
    # ...and b waits the whole lease time from when it saw a's last renew.
    assert not b.try_acquire_or_renew()
    clock.now += TIMING.margin_seconds
    assert b.try_acquire_or_renew() and b.active() and b.term == 1
    spec = _lease(coordination, namespace, "lease")["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("replica-b", 1)
    # The old holder's next attempt finds b: it stays out.
    assert not a.try_acquire_or_renew() and not a.active()


def test_a_renewing_holder_keeps_the_lease_however_long(
    coordination: k8s.CoordinationV1Api, namespace: str
) -> None:
    clock = Clock()
    a, b = _pair(coordination, namespace, clock)
    assert a.try_acquire_or_renew()
    for _ in range(10):
        clock.now += TIMING.renew_seconds
        assert a.try_acquire_or_renew() and a.active()
        assert not b.try_acquire_or_renew()
    assert a.term == 1  # renewing is not a new term: no needless catch-up


def test_a_holder_whose_lease_is_taken_stops_at_its_next_renew(
    coordination: k8s.CoordinationV1Api, namespace: str
) -> None:
    clock = Clock()
    a, _ = _pair(coordination, namespace, clock)
    assert a.try_acquire_or_renew()
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    coordination.patch_namespaced_lease(
        "lease", namespace, {"spec": {"holderIdentity": "intruder", "renewTime": stamp}}
    )
    assert a.active()  # nothing read yet
    assert not a.try_acquire_or_renew()
    assert not a.active()


def test_a_released_lease_is_taken_at_once(
    coordination: k8s.CoordinationV1Api, namespace: str
) -> None:
    clock = Clock()
    a, b = _pair(coordination, namespace, clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.active()
    assert b.try_acquire_or_renew() and b.active()
    # a comes back: a new term, not the old one resumed
    assert not a.try_acquire_or_renew()


# ----- the extender replicas -----------------------------------------------------------------


@pytest.fixture
def replicas(
    services: LabHandle, namespace: str, tmp_path: Path
) -> Iterator[list[ExtenderProcess]]:
    started = [
        extender_process(
            tmp_path,
            name,
            services.kubeconfig,
            leader_election=True,
            lease_namespace=namespace,
            lease_name="vslice-scheduler",
            lease_seconds=9.0,
            lease_renew_seconds=0.5,
        ).start(until="serving")
        for name in ("lease-a", "lease-b")
    ]
    try:
        yield started
    finally:
        for replica in started:
            replica.stop()


def _active(replicas: list[ExtenderProcess], timeout: float = 20.0) -> ExtenderProcess:
    found: list[ExtenderProcess] = []

    def one_ready() -> bool:
        found[:] = [r for r in replicas if r.process and r.process.poll() is None and r.ready()]
        return len(found) == 1

    wait_until(one_ready, timeout, "exactly one active (ready) extender replica")
    return found[0]


def _place(replica: ExtenderProcess, pod: dict[str, Any], nodes: list[str]) -> str:
    """Filter then bind through one replica, as kube-scheduler would: the bind's error."""
    answer = replica.post("filter", {"Pod": pod, "NodeNames": nodes})
    if not answer["NodeNames"]:
        return "no node"
    metadata = pod["metadata"]
    binding = {
        "PodName": metadata["name"],
        "PodNamespace": metadata["namespace"],
        "PodUID": metadata["uid"],
        "Node": answer["NodeNames"][0],
    }
    error: str = replica.post("bind", binding)["Error"]
    return error


def _rounds(services: LabHandle, namespace: str, replica: ExtenderProcess, limit: int) -> int:
    """Place waiting pods through ``replica`` until ``limit`` are bound or nothing moves."""
    nodes = list(services.record.nodes)
    placed = 0
    for _ in range(8):
        waiting = [p for p in _pods(services, namespace) if not p["spec"].get("nodeName")]
        waiting = waiting[: max(0, limit - placed)]
        if not waiting:
            break
        with ThreadPoolExecutor(8) as pool:
            now = sum(
                error == "" for error in pool.map(lambda p: _place(replica, p, nodes), waiting)
            )
        placed += now
        if not now:
            break
    return placed


def test_only_the_active_replica_binds_and_a_killed_one_is_replaced_without_double_booking(
    services: LabHandle, emptied: str, replicas: list[ExtenderProcess]
) -> None:
    active = _active(replicas)
    standby = next(r for r in replicas if r is not active)
    room = free_slices(audit(services.core), SLICE_MIB, SLICE_CORES)
    _create_many(services, emptied, room + 10, scheduler_name="e2e-lease")
    nodes = list(services.record.nodes)
    first = next(p for p in _pods(services, emptied) if not p["spec"].get("nodeName"))
    refused = _place(standby, first, nodes)
    assert "is not the active extender" in refused, refused

    half = _rounds(services, emptied, active, room // 2)
    assert half == room // 2
    active.kill()  # a crash: the Lease is not given up, the standby must wait it out
    killed_at = time.monotonic()
    assert _active(replicas, timeout=30.0) is standby
    assert time.monotonic() - killed_at <= 9.0 + 0.5 + 3.0  # lease time, one retry, slack

    rest = _rounds(services, emptied, standby, room)
    after = audit(services.core)
    assert after.problems == []
    assert half + rest == room == len(_bound(services, emptied))
    assert free_slices(after, SLICE_MIB, SLICE_CORES) == 0
    _assert_every_bound_pod_has_its_allocation(services, emptied)
    metrics = standby.metrics()
    assert 'reason="not_active",result="failed",verb="bind"' in metrics


def test_an_active_replica_whose_lease_is_taken_stops_binding_at_once(
    services: LabHandle,
    emptied: str,
    replicas: list[ExtenderProcess],
    coordination: k8s.CoordinationV1Api,
) -> None:
    active = _active(replicas)
    for replica in replicas:
        if replica is not active:
            replica.stop()  # only the intruder competes
    _create_many(services, emptied, 2, scheduler_name="e2e-lease")
    nodes = list(services.record.nodes)
    first, second = _pods(services, emptied)
    assert _place(active, first, nodes) == ""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    coordination.patch_namespaced_lease(
        "vslice-scheduler", emptied, {"spec": {"holderIdentity": "intruder", "renewTime": stamp}}
    )
    wait_until(lambda: not active.ready(), 3.0, "the replica to see its Lease taken")
    assert "is not the active extender" in _place(active, second, nodes)
    assert len(_bound(services, emptied)) == 1
