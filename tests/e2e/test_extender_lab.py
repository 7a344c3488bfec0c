"""The extender in the lab: the real kube-scheduler calls it, the API server holds the truth.

Every check of "never over-allocated" reads the node inventories and the pods' allocation
annotations back from the API server (``audit``), independent of any extender's memory.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import LabHandle
from extender_processes import audit, extender_process, free_slices, wait_until
from kubernetes.client.exceptions import ApiException
from vslice_core.annotations import ALLOCATION, BIND_TIME, decode_allocation, decode_bind_time

pytestmark = pytest.mark.timeout(300)

SLICE = {"nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "10"}
SLICE_MIB, SLICE_CORES = 8000, 10


@pytest.fixture
def emptied(services: LabHandle, namespace: str) -> Iterator[str]:
    """The namespace, in a quiet cluster (no namespace of an earlier test still being
    deleted, so capacity does not change under the test); at the end its pods are deleted
    and gone, so later tests find room."""
    wait_until(lambda: not _terminating_namespaces(services), 120, "earlier namespaces to go")
    yield namespace
    core = services.core
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _preload_content=False)
    wait_until(lambda: not _pods(services, namespace), 90, f"pods of {namespace} to be deleted")


def _terminating_namespaces(lab: LabHandle) -> list[str]:
    body: Any = json.loads(lab.core.list_namespace(_preload_content=False).data)
    return [
        item["metadata"]["name"]
        for item in body["items"]
        if item.get("status", {}).get("phase") == "Terminating"
    ]


def _pods(lab: LabHandle, namespace: str) -> list[dict[str, Any]]:
    body: Any = json.loads(lab.core.list_namespaced_pod(namespace, _preload_content=False).data)
    items: list[dict[str, Any]] = body["items"]
    return items


def _bound(lab: LabHandle, namespace: str) -> list[dict[str, Any]]:
    return [p for p in _pods(lab, namespace) if p["spec"].get("nodeName")]


def _create_many(
    lab: LabHandle, namespace: str, count: int, *, scheduler_name: str | None = None
) -> None:
    def create(index: int) -> None:
        lab.create_pod(namespace, f"s{index:03d}", limits=SLICE, scheduler_name=scheduler_name)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(count)))


def _assert_every_bound_pod_has_its_allocation(lab: LabHandle, namespace: str) -> None:
    for pod in _bound(lab, namespace):
        value = (pod["metadata"].get("annotations") or {}).get(ALLOCATION)
        assert value, f"{pod['metadata']['name']} is bound without an allocation"
        allocation = decode_allocation(value)
        assert allocation.node == pod["spec"]["nodeName"]
        ((grant,),) = [c.gpus for c in allocation.containers]
        assert (grant.memory_mib, grant.cores) == (SLICE_MIB, SLICE_CORES)


def test_two_hundred_pods_at_once_on_a_nearly_full_cluster_never_over_allocate(
    services: LabHandle, emptied: str
) -> None:
    before = audit(services.core)
    assert before.problems == []
    room = free_slices(before, SLICE_MIB, SLICE_CORES)
    assert 0 < room < 200, f"the lab should hold fewer than 200 slices of 8000 MiB, has {room}"

    _create_many(services, emptied, 200)

    # Done when the cluster is full: no GPU takes one more slice.
    wait_until(
        lambda: free_slices(audit(services.core), SLICE_MIB, SLICE_CORES) == 0,
        180,
        "the cluster to fill up",
    )
    time.sleep(3)  # pods still retrying must not book anything more
    after = audit(services.core)
    assert after.problems == []
    assert free_slices(after, SLICE_MIB, SLICE_CORES) == 0
    assert len(_bound(services, emptied)) >= room
    _assert_every_bound_pod_has_its_allocation(services, emptied)


def test_an_extender_killed_mid_stream_restarts_and_loses_and_duplicates_nothing(
    services: LabHandle, emptied: str, tmp_path: Path
) -> None:
    replica = extender_process(tmp_path, "e2e-restart", services.kubeconfig, lock_ttl_seconds=3)
    replica.start()
    previous, services.extender.upstream = services.extender.upstream, replica.url
    try:
        room = free_slices(audit(services.core), SLICE_MIB, SLICE_CORES)
        count = min(40, room)
        assert count >= 20, f"the lab has room for only {room} slices"
        creator = threading.Thread(target=_create_many, args=(services, emptied, count))
        creator.start()
        wait_until(lambda: len(_bound(services, emptied)) >= count // 4, 60, "some pods bound")
        replica.kill()
        replica.start()  # same port and settings: the scheduler keeps calling the same URL
        creator.join()
        wait_until(lambda: len(_bound(services, emptied)) == count, 120, f"all {count} bound")
        after = audit(services.core)
        assert after.problems == []
        _assert_every_bound_pod_has_its_allocation(services, emptied)

        def ledger_matches_annotations() -> bool:
            booked = audit(services.core).used
            return _ledger_memory(replica.metrics()) == {
                u: m for u, (m, _, _) in booked.items() if m
            }

        # The restarted ledger, rebuilt from annotations, books exactly what they say.
        wait_until(ledger_matches_annotations, 15, "the ledger to equal the annotations")
    finally:
        services.extender.upstream = previous
        replica.stop()


def _ledger_memory(metrics: str) -> dict[str, int]:
    """MiB booked per GPU UUID (the gauge is in bytes; labels gpu, index, model, node, path)."""
    pattern = re.compile(r'^vslice_gpu_allocated_memory_bytes\{gpu="([^"]+)",[^}]*\} (\S+)$')
    found = {}
    for line in metrics.splitlines():
        match = pattern.match(line)
        if match and float(match[2]):
            found[match[1]] = int(float(match[2])) // (1024 * 1024)
    return found


def test_two_extender_replicas_never_double_book_a_gpu(
    services: LabHandle, emptied: str, tmp_path: Path
) -> None:
    replicas = [
        extender_process(tmp_path, name, services.kubeconfig, lock_ttl_seconds=5).start()
        for name in ("replica-a", "replica-b")
    ]
    try:
        room = free_slices(audit(services.core), SLICE_MIB, SLICE_CORES)
        # No scheduler serves this name: the test plays kube-scheduler against both replicas.
        _create_many(services, emptied, room + 20, scheduler_name="e2e-two-replicas")
        nodes = list(services.record.nodes)

        def place(job: tuple[int, dict[str, Any]]) -> bool:
            index, pod = job
            replica = replicas[index % 2]
            answer = replica.post("filter", {"Pod": pod, "NodeNames": nodes})
            if not answer["NodeNames"]:
                return False
            metadata = pod["metadata"]
            binding = {
                "PodName": metadata["name"],
                "PodNamespace": metadata["namespace"],
                "PodUID": metadata["uid"],
                "Node": answer["NodeNames"][0],
            }
            return not replica.post("bind", binding)["Error"]

        for _ in range(8):  # rounds, as the scheduler retries what failed
            waiting = [p for p in _pods(services, emptied) if not p["spec"].get("nodeName")]
            with ThreadPoolExecutor(8) as pool:
                placed = sum(pool.map(place, enumerate(waiting)))
            if not placed:
                break
        after = audit(services.core)
        assert after.problems == []
        assert free_slices(after, SLICE_MIB, SLICE_CORES) == 0
        assert len(_bound(services, emptied)) == room
        _assert_every_bound_pod_has_its_allocation(services, emptied)
        bound = 'vslice_extender_decisions_total{reason="none",result="bound",verb="bind"}'
        for replica in replicas:  # both replicas really booked, side by side
            assert bound in replica.metrics(), f"{replica.name} bound nothing"
            assert replica.stop() == 0, f"{replica.name} did not stop cleanly on SIGTERM"
    finally:
        for replica in replicas:
            replica.stop()


def test_a_namespace_quota_stops_slices_beyond_it_at_scheduling(
    services: LabHandle, emptied: str
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu"},
        "spec": {"hard": {"requests.nvidia.com/gpumem": "60000"}},
    }
    services.core.create_namespaced_resource_quota(emptied, quota, _preload_content=False)
    time.sleep(1)  # the extender's quota watch
    # 60 % of an A100 is 49152 MiB: the first fits the quota, the second does not. Percentages
    # are invisible to the API server's own quota, so only vslice can count them.
    limits = {"nvidia.com/gpumem-percentage": "60", "nvidia.com/gpucores": "10"}
    annotations = {"vslice.io/gpu-type": "a100"}
    services.create_pod(emptied, "first", limits=limits, annotations=annotations)
    services.wait_for_pod(emptied, "first", lambda p: bool(p["spec"].get("nodeName")), what="bound")
    services.create_pod(emptied, "second", limits=limits, annotations=annotations)

    def refused(pod: dict[str, Any]) -> bool:
        return any(
            "quota_exceeded" in (c.get("message") or "")
            for c in pod["status"].get("conditions") or []
        )

    pod = services.wait_for_pod(emptied, "second", refused, what="refused for quota")
    assert not pod["spec"].get("nodeName")


def test_a_deleted_pod_gives_its_slice_back(services: LabHandle, emptied: str) -> None:
    limits = {"nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "100"}
    annotations = {"vslice.io/gpu-uuid": "GPU-t400-0000-0000-0000-000000000003"}
    services.create_pod(emptied, "whole", limits=limits, annotations=annotations)
    services.wait_for_pod(emptied, "whole", lambda p: bool(p["spec"].get("nodeName")), what="bound")
    services.core.delete_namespaced_pod(
        "whole", emptied, grace_period_seconds=0, _preload_content=False
    )

    def gone() -> bool:
        try:
            services.read_pod(emptied, "whole")
        except ApiException as error:
            return error.status == 404
        return False

    wait_until(gone, 30, "the pod to be deleted")
    services.create_pod(emptied, "again", limits=limits, annotations=annotations)
    services.wait_for_pod(emptied, "again", lambda p: bool(p["spec"].get("nodeName")), what="bound")


def test_a_pod_waiting_for_room_is_placed_soon_after_a_slice_is_freed(
    services: LabHandle, emptied: str
) -> None:
    # kube-scheduler parks a pod that no node could take; it must come back when a GPU pod
    # goes away, not after the scheduler's 5-minute flush of unschedulable pods.
    limits = {"nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "100"}
    annotations = {"vslice.io/gpu-uuid": "GPU-t400-0000-0000-0000-000000000002"}
    services.create_pod(emptied, "holder", limits=limits, annotations=annotations)
    services.wait_for_pod(
        emptied, "holder", lambda p: bool(p["spec"].get("nodeName")), what="bound"
    )
    services.create_pod(emptied, "waiter", limits=limits, annotations=annotations)

    def unschedulable(pod: dict[str, Any]) -> bool:
        return any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in pod["status"].get("conditions") or []
        )

    services.wait_for_pod(emptied, "waiter", unschedulable, what="Unschedulable", timeout=60)
    services.core.delete_namespaced_pod(
        "holder", emptied, grace_period_seconds=0, _preload_content=False
    )
    # 90 s: far below the 300 s a retry that waits for the flush would take
    pod = services.wait_for_pod(
        emptied, "waiter", lambda p: bool(p["spec"].get("nodeName")), what="bound", timeout=90
    )
    ((grant,),) = [
        c.gpus for c in decode_allocation(pod["metadata"]["annotations"][ALLOCATION]).containers
    ]
    assert grant.uuid == annotations["vslice.io/gpu-uuid"]


def test_a_repeated_bind_is_answered_as_done_and_a_replaced_pod_is_not_bound(
    services: LabHandle, emptied: str, tmp_path: Path
) -> None:
    replica = extender_process(tmp_path, "e2e-binds", services.kubeconfig).start()
    try:
        pod = services.create_pod(emptied, "once", limits=SLICE, scheduler_name="e2e-direct")
        answer = replica.post("filter", {"Pod": pod, "NodeNames": list(services.record.nodes)})
        (node,) = answer["NodeNames"]
        meta = pod["metadata"]
        binding = {"PodName": "once", "PodNamespace": emptied, "PodUID": meta["uid"], "Node": node}
        assert replica.post("bind", binding) == {"Error": ""}
        annotations = services.read_pod(emptied, "once")["metadata"]["annotations"]
        first = annotations[ALLOCATION]
        # the Binding carried the bind time too: the device plugin's matching order
        assert decode_bind_time(annotations[BIND_TIME]) <= datetime.now(UTC)
        # the scheduler timed out and asks again: same answer, same allocation
        assert replica.post("bind", binding) == {"Error": ""}
        assert services.read_pod(emptied, "once")["metadata"]["annotations"][ALLOCATION] == first
        other = next(n for n in services.record.nodes if n != node)
        assert "already bound" in replica.post("bind", {**binding, "Node": other})["Error"]

        services.core.delete_namespaced_pod(
            "once", emptied, grace_period_seconds=0, _preload_content=False
        )
        wait_until(lambda: not _pods(services, emptied), 30, "the pod to be deleted")
        services.create_pod(emptied, "once", limits=SLICE, scheduler_name="e2e-direct")
        stale = replica.post("bind", binding)  # the old uid: must not bind the new pod
        assert "uid" in stale["Error"]
        assert not services.read_pod(emptied, "once")["spec"].get("nodeName")
        assert audit(services.core).problems == []
    finally:
        replica.stop()
