"""The node agent's watched view of its node's pods, and Allocate on it: no list per call, one
list for a pod the watch has not shown yet, no lock across API calls, the delivered record
written after the answer (and retried), restarts, and the API server's side of the watch.

The device plugin runs as in test_deviceplugin_grpc.py (real gRPC, static backend) against
the in-memory API server, whose knobs play a lagging watch (``watch_paused``), a compacted
history (``compact``: 410 Gone), a dropped stream (``break_watches``), a slow or blocked call
(``latency_s``, ``before_call``) and count every call (``calls``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubelet import Kubelet
from kubernetes.client.exceptions import ApiException
from memory_nodeapi import MemoryNodeApi
from plugin_lab import GPU_A, GPU_B, NODE, SLOTS, Lab, allocate, delivered, gpu_pod, grant, make_lab
from test_deviceplugin_grpc import recorded
from test_extender_watch import GONE, Listed, Stream
from vslice_core import annotations as ann
from vslice_core.errors import ClusterError
from vslice_kube.nodestate import NodeState
from vslice_node.agent.nodeagent import NodeAgent
from vslice_node.deviceplugin.allocator import NoPendingAllocation
from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.deviceplugin.podview import PodSnapshot, PodView
from vslice_node.gpus.backends.static import StaticBackend

CREATED = "2026-01-01T10:00:00Z"


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def seen(view: PodView, name: str) -> bool:
    snapshot = view.snapshot()
    return snapshot is not None and ("team-a", name) in snapshot.names()


def one_gpu(name: str, memory: int = 1000) -> dict[str, Any]:
    return gpu_pod(name, CREATED, {"main": [grant(GPU_A, 0, memory)]})


@pytest.fixture
def running(short_dir: Path, tmp_path: Path) -> Iterator[Lab]:
    lab = make_lab(short_dir, tmp_path, injection="mounts")
    kubelet = Kubelet(lab.directory)
    lab.plugin.start()
    kubelet.next_registration()
    wait_until(lambda: lab.plugin.allocator.view.synced)
    yield lab
    lab.api.resume_watches()
    lab.api.before_call = lambda name: None
    lab.plugin.stop()
    kubelet.stop()


# -- the view ----------------------------------------------------------------------------------


def test_the_view_lists_once_then_follows_the_watch() -> None:
    api = MemoryNodeApi()
    api.put_pod(one_gpu("early"))
    view = PodView(api, NODE)
    view.start()
    try:
        wait_until(lambda: seen(view, "early"))
        api.put_pod(one_gpu("later"))
        wait_until(lambda: seen(view, "later"))
        api.annotate_pod("team-a", "later", "uid-later", {"example.com/note": "x"})
        wait_until(lambda: view.events >= 2)
        api.delete_pod("team-a", "early")
        wait_until(lambda: not seen(view, "early"))
        snapshot = view.snapshot()
        assert snapshot is not None and "uid-early" in snapshot.gone
        assert api.calls["list_pods_on_node"] == 1 == view.lists
        assert view.state == "watching (1 pods)"
    finally:
        view.stop()


def test_410_gone_lists_again_and_the_view_stays_usable_meanwhile() -> None:
    api = MemoryNodeApi()
    view = PodView(api, NODE)
    view.start()
    try:
        wait_until(lambda: view.lists == 1)
        api.watch_paused = True
        api.put_pod(one_gpu("during"))  # happens while the history is compacted away
        api.compact()
        wait_until(lambda: view.lists == 2)
        assert seen(view, "during")
        assert view.synced
    finally:
        view.stop()


def test_a_broken_watch_distrusts_the_view_until_a_list_works_again() -> None:
    api = MemoryNodeApi()
    view = PodView(api, NODE, backoff_s=0.05)
    view.start()
    try:
        wait_until(lambda: view.synced)
        api.reachable = False
        api.break_watches()
        wait_until(lambda: view.snapshot() is None)
        assert view.state.startswith("failing: ")
        api.put_pod(one_gpu("meanwhile"))
        api.reachable = True
        wait_until(lambda: seen(view, "meanwhile"))
        assert view.lists >= 2
    finally:
        view.stop()


def test_the_view_lists_again_every_resync() -> None:
    api = MemoryNodeApi()
    view = PodView(api, NODE, resync_s=0.2)
    view.start()
    try:
        wait_until(lambda: view.lists >= 3, timeout_s=5)
    finally:
        view.stop()


def test_stop_ends_a_watch_that_waits_for_events() -> None:
    api = MemoryNodeApi()
    view = PodView(api, NODE)
    view.start()
    wait_until(lambda: api.calls["watch_pods_on_node"] == 1)
    started = time.monotonic()
    view.stop()
    assert time.monotonic() - started < 2


def test_fresh_lists_asked_at_once_share_a_call_but_never_an_older_one() -> None:
    api = MemoryNodeApi()
    gate, entered = threading.Event(), threading.Event()
    list_now = api.list_pods_on_node

    def slow_list(node: str) -> tuple[list[dict[str, Any]], str]:
        answer = list_now(node)  # the list's moment: before the gate
        if threading.current_thread().name == "first":
            entered.set()
            assert gate.wait(10)
        return answer

    api.list_pods_on_node = slow_list  # type: ignore[method-assign]
    view = PodView(api, NODE)  # not started: fresh lists only
    first: list[PodSnapshot] = []
    later: list[PodSnapshot] = []
    runner = threading.Thread(target=lambda: first.append(view.fresh_list()), name="first")
    runner.start()
    assert entered.wait(5)
    api.put_pod(one_gpu("new"))  # after the running list read the pods
    others = [threading.Thread(target=lambda: later.append(view.fresh_list())) for _ in range(8)]
    for thread in others:
        thread.start()
    time.sleep(0.2)  # all eight wait for the running list
    gate.set()
    for thread in [runner, *others]:
        thread.join(10)
    assert ("team-a", "new") not in first[0].names()
    assert len(later) == 8 and all(("team-a", "new") in s.names() for s in later)
    assert view.fresh_lists == 2  # the running one, and one shared by the eight


# -- Allocate on the view ------------------------------------------------------------------------


def test_allocate_makes_no_api_call_when_the_view_has_the_pod(running: Lab) -> None:
    running.api.put_pod(one_gpu("train"))
    wait_until(lambda: seen(running.plugin.allocator.view, "train"))
    calls = dict(running.api.calls)
    answer = allocate(running.client(), f"{GPU_A}::0")
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert running.plugin.allocator.fresh_lists == 0
    assert running.api.calls["list_pods_on_node"] == calls.get("list_pods_on_node", 0)
    assert recorded(running, "train") == ["main"]


def test_get_preferred_allocation_reads_the_view_too(running: Lab) -> None:
    running.api.put_pod(gpu_pod("train", CREATED, {"main": [grant(GPU_B, 1)]}))
    wait_until(lambda: seen(running.plugin.allocator.view, "train"))
    available = [f"{GPU_A}::{s}" for s in range(SLOTS)] + [f"{GPU_B}::{s}" for s in range(SLOTS)]
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=1)
        ]
    )
    response = running.client().GetPreferredAllocation(request, timeout=5)
    assert list(response.container_responses[0].deviceIDs) == [f"{GPU_B}::0"]
    assert running.plugin.allocator.fresh_lists == 0


def test_a_pod_the_watch_has_not_shown_yet_is_found_by_one_list(running: Lab) -> None:
    running.api.watch_paused = True  # the kubelet saw the binding; our watch has not yet
    running.api.put_pod(
        gpu_pod("new", CREATED, {"first": [grant(GPU_A, 0, 1000)], "second": [grant(GPU_A, 0)]})
    )
    client = running.client()
    assert allocate(client, f"{GPU_A}::0").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert running.plugin.allocator.fresh_lists == 1
    # The list's pods stay in the view until the watch shows them: no second list.
    assert allocate(client, f"{GPU_A}::1").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "30720m"
    assert running.plugin.allocator.fresh_lists == 1
    running.api.resume_watches()
    assert recorded(running, "new") == ["first", "second"]


def test_no_pending_allocation_is_said_only_after_a_fresh_list(running: Lab) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        allocate(running.client(), f"{GPU_A}::0")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert running.plugin.allocator.fresh_lists == 1


def test_a_pod_the_kubelet_admits_but_the_view_lacks_is_looked_up(running: Lab) -> None:
    from kubelet import PodResources

    server = PodResources(running.directory.parent / "pod-resources.sock")
    try:
        # "first" is in the view; "second" bound later, the kubelet admits it, our watch lags.
        running.api.put_pod(one_gpu("first", 1000))
        wait_until(lambda: seen(running.plugin.allocator.view, "first"))
        running.api.watch_paused = True
        running.api.put_pod(one_gpu("second", 2000))
        server.admit("team-a", "second", "main")
        answer = allocate(running.client(), f"{GPU_A}::0")
        assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
        assert running.plugin.allocator.fresh_lists == 1
    finally:
        server.stop()


def test_a_claim_outlives_a_view_that_has_not_caught_up_with_its_pod(running: Lab) -> None:
    allocator = running.plugin.allocator
    allocator.view.overlay_s = 0  # the view alone: it never saw the pod
    running.api.watch_paused = True
    running.api.failing_writes = True  # and no delivered record either
    running.api.put_pod(one_gpu("once"))
    allocate(running.client(), f"{GPU_A}::0")
    # The view lacks the pod, its list is older than the claim: the claim holds.
    with pytest.raises(grpc.RpcError) as raised:
        allocate(running.client(), f"{GPU_A}::1")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert len(allocator._claims) == 1
    running.api.failing_writes = False
    running.api.resume_watches()
    assert recorded(running, "once") == ["main"]


@pytest.mark.parametrize("lagging", [False, True], ids=["live-watch", "lagging-watch"])
def test_many_allocates_at_once_never_share_an_allocation(running: Lab, lagging: bool) -> None:
    """16 containers started at once. With a live watch, delivered records come back through
    it and settle claims while other calls choose; with a lagging one, half the pods are known
    only to fresh lists, which are ahead of the view."""
    count = 16
    names = [f"job-{n:02d}" for n in range(count)]
    for n, name in enumerate(names):
        if lagging and n == count // 2:
            wait_until(lambda: seen(running.plugin.allocator.view, names[count // 2 - 1]))
            running.api.watch_paused = True  # the rest only a list shows
        created = f"2026-01-01T10:00:{n:02d}Z"
        running.api.put_pod(gpu_pod(name, created, {"main": [grant(GPU_A, 0, 1000 + n)]}))
    client = running.client()
    barrier = threading.Barrier(count)
    answers: list[str] = []

    def start(slot: int) -> None:
        barrier.wait()
        answer = allocate(client, f"{GPU_A}::{slot % SLOTS}")
        answers.append(answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"])

    threads = [threading.Thread(target=start, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert sorted(answers) == [f"{1000 + n}m" for n in range(count)]
    running.api.resume_watches()
    assert running.plugin.allocator.deliveries.flush(5)
    assert [delivered(running.api, name) for name in names] == [["main"]] * count
    with pytest.raises(grpc.RpcError):  # and nothing is left to hand out twice
        allocate(client, f"{GPU_A}::0")


# -- no lock across API calls ----------------------------------------------------------------


def test_a_blocked_list_does_not_hold_up_an_allocate_for_another_pod(running: Lab) -> None:
    running.api.put_pod(one_gpu("ready", 1000))
    wait_until(lambda: seen(running.plugin.allocator.view, "ready"))
    running.api.watch_paused = True
    running.api.put_pod(gpu_pod("slow", CREATED, {"main": [grant(GPU_A, 0), grant(GPU_B, 1)]}))
    gate, entered = threading.Event(), threading.Event()

    def before(name: str) -> None:
        if name == "list_pods_on_node" and threading.current_thread().name.startswith("dp"):
            entered.set()
            assert gate.wait(10)

    running.api.before_call = before
    client = running.client()
    slow: list[pb.ContainerAllocateResponse] = []
    waiting = threading.Thread(
        target=lambda: slow.append(allocate(client, f"{GPU_A}::0", f"{GPU_B}::0"))
    )
    waiting.start()
    assert entered.wait(5)  # the 2-GPU Allocate sits in its list call
    started = time.monotonic()
    assert allocate(client, f"{GPU_A}::1").envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert time.monotonic() - started < 2
    assert waiting.is_alive()
    gate.set()
    waiting.join(10)
    assert slow and slow[0].envs["NVIDIA_VISIBLE_DEVICES"] == f"{GPU_A},{GPU_B}"


# -- the delivered record ---------------------------------------------------------------------


def test_the_delivered_record_is_written_after_the_answer(running: Lab) -> None:
    running.api.put_pod(one_gpu("train"))
    wait_until(lambda: seen(running.plugin.allocator.view, "train"))
    gate, entered = threading.Event(), threading.Event()

    def before(name: str) -> None:
        if name == "annotate_pod":
            entered.set()
            assert gate.wait(10)

    running.api.before_call = before
    answer = allocate(running.client(), f"{GPU_A}::0")  # answered while the patch waits
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == GPU_A
    assert entered.wait(5)
    assert ann.DELIVERED not in running.api.pod("team-a", "train")["metadata"]["annotations"]
    gate.set()
    assert recorded(running, "train") == ["main"]


def test_a_failed_record_is_retried_with_backoff_until_the_server_answers(running: Lab) -> None:
    running.api.put_pod(one_gpu("train"))
    running.api.failing_writes = True
    allocate(running.client(), f"{GPU_A}::0")
    wait_until(lambda: running.api.calls["annotate_pod"] >= 3)
    assert running.plugin.status()["delivered_records_waiting"] == 1
    time.sleep(1.0)
    assert running.api.calls["annotate_pod"] < 10  # backoff, not a busy loop
    running.api.failing_writes = False
    # No flush: the writer's own retry writes it (backoff at most 2 s).
    wait_until(
        lambda: ann.DELIVERED in running.api.pod("team-a", "train")["metadata"]["annotations"]
    )
    assert delivered(running.api, "train") == ["main"]
    assert running.plugin.status()["delivered_records_waiting"] == 0


def test_a_record_for_a_pod_that_is_gone_is_dropped(running: Lab) -> None:
    running.api.put_pod(one_gpu("short"))
    running.api.failing_writes = True
    allocate(running.client(), f"{GPU_A}::0")
    running.api.delete_pod("team-a", "short")
    running.api.failing_writes = False
    assert running.plugin.allocator.deliveries.flush(5)  # 404: dropped, not retried forever
    assert running.plugin.allocator.deliveries.waiting() == 0


def test_a_same_named_replacement_never_gets_the_record(running: Lab) -> None:
    running.api.put_pod(one_gpu("job"))
    running.api.failing_writes = True
    allocate(running.client(), f"{GPU_A}::0")
    replacement = one_gpu("job")
    replacement["metadata"]["uid"] = "uid-job-2"
    running.api.put_pod(replacement)
    running.api.failing_writes = False
    assert running.plugin.allocator.deliveries.flush(5)  # 409: the UID precondition
    assert ann.DELIVERED not in running.api.pod("team-a", "job")["metadata"]["annotations"]


# -- restarts -----------------------------------------------------------------------------------


def test_a_restarted_agent_rebuilds_its_view_and_never_hands_out_a_delivered_container(
    running: Lab,
) -> None:
    running.api.put_pod(one_gpu("done"))
    allocate(running.client(), f"{GPU_A}::0")
    assert recorded(running, "done") == ["main"]
    running.plugin.stop()
    backend = StaticBackend(running.inventory_file, NODE, poll_s=0.1)
    again = NodeAgent(running.plugin.settings, backend, running.api)
    again.allocator.start()
    try:
        wait_until(lambda: seen(again.allocator.view, "done"))
        with pytest.raises(NoPendingAllocation):
            again.allocator.allocate([f"{GPU_A}::1"])
        running.api.put_pod(one_gpu("next", 2000))
        found = again.allocator.allocate([f"{GPU_A}::1"])
        assert found.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    finally:
        again.allocator.stop()
        backend.close()


# -- the API server's side: NodeState's list and watch ----------------------------------------


class CoreApi:
    """``list_pod_for_all_namespaces`` answering from a script, recording each call."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def pod_event(kind: str, name: str, version: str) -> dict[str, Any]:
    return {
        "type": kind,
        "object": {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": version}},
    }


def test_node_state_lists_with_the_resource_version_and_watches_from_it() -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    core = CoreApi(Listed(["a"], "7"), Stream([pod_event("ADDED", "b", "8"), bookmark]))
    state = NodeState(core)  # type: ignore[arg-type]
    pods, version = state.list_pods_on_node(NODE)
    assert ([p["metadata"]["name"] for p in pods], version) == (["a"], "7")
    events = list(state.watch_pods_on_node(NODE, version, 60))
    assert [kind for kind, _ in events] == ["ADDED", "BOOKMARK"]
    assert events[0][1]["metadata"]["uid"] == "u-b"
    watch = core.calls[1]
    assert watch["watch"] is True and watch["resource_version"] == "7"
    assert watch["field_selector"] == f"spec.nodeName={NODE}"
    assert watch["allow_watch_bookmarks"] is True and watch["timeout_seconds"] == 60


def test_node_state_turns_410_into_a_cluster_error_with_its_code() -> None:
    core = CoreApi(Stream([pod_event("MODIFIED", "a", "8"), GONE]), ApiException(status=410))
    state = NodeState(core)  # type: ignore[arg-type]
    stream = iter(state.watch_pods_on_node(NODE, "5", 60))
    assert next(stream)[0] == "MODIFIED"
    with pytest.raises(ClusterError) as in_stream:
        next(stream)
    assert in_stream.value.code == 410
    with pytest.raises(ClusterError) as at_open:
        state.watch_pods_on_node(NODE, "5", 60)
    assert at_open.value.code == 410


def test_the_memory_double_keeps_the_same_watch_semantics() -> None:
    api = MemoryNodeApi()
    pods, version = api.list_pods_on_node(NODE)
    assert pods == []
    api.put_pod(one_gpu("a"))
    elsewhere = one_gpu("b")
    elsewhere["spec"]["nodeName"] = "other-node"
    api.put_pod(elsewhere)
    api.delete_pod("team-a", "a")
    watch = api.watch_pods_on_node(NODE, version, 0.2)
    assert [(kind, pod["metadata"]["name"]) for kind, pod in watch] == [
        ("ADDED", "a"),
        ("DELETED", "a"),
    ]
    api.compact()
    with pytest.raises(ClusterError) as raised:
        list(api.watch_pods_on_node(NODE, version, 0.2))
    assert raised.value.code == 410
