"""Waits, logs and the commands that wait say why a pod does not progress, at once.

The real ``Client``, ``Workload`` and commands run against :class:`Cluster`, which answers the
Kubernetes calls (what ``vslice_kube.workloads.Workloads`` does) from API-shaped objects: the
pod's successive states come from a script, one per read, as the API would send them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pytest
import vslice
from api_objects import A100, NoDraObjects, cluster_objects, node
from vslice.cli import main
from vslice.errors import ClusterError, Stalled, Timeout
from vslice_kube.workloads import Workloads

SIMULATED = {"vslice.io/simulated": "true"}


def lab_nodes() -> list[dict[str, Any]]:
    """One simulated A100 node (as the lab marks it) and one real L4 node."""
    simulated = node("lab-a100", A100, 81920, 2)
    simulated["metadata"]["labels"] = dict(SIMULATED)
    return [simulated, node("lab-l4", "NVIDIA-L4", 23034, 1)]


def state(phase: str, node_name: str | None = None, **status: Any) -> dict[str, Any]:
    """The pod ``team-a/train`` as the API sends it at one moment."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10240"}
    return {
        "metadata": {"namespace": "team-a", "name": "train", "uid": "uid-train"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "main", "resources": {"limits": limits}}],
        },
        "status": {"phase": phase, **status},
    }


def pull_back_off() -> dict[str, Any]:
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}
    return state(
        "Pending",
        "lab-l4",
        containerStatuses=[{"name": "main", "image": "nope:1", "state": {"waiting": waiting}}],
    )


def unschedulable(memory_mib: int = 10240) -> dict[str, Any]:
    pod = state(
        "Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 node(s) did not fit (vslice extender).",
            }
        ],
    )
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = str(memory_mib)
    return pod


class Cluster(NoDraObjects):
    """The calls ``Client`` and ``Workload`` make; ``get_pod`` plays ``states`` in order."""

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        states: Sequence[dict[str, Any] | Exception] = (),
        *,
        others: Sequence[dict[str, Any]] = (),
        events: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.nodes, self.states, self.others = nodes, list(states), list(others)
        self.events = list(events)
        self.reads = 0
        self.created: list[dict[str, Any]] = []
        self.dra_unavailable: str | None = None

    def close(self) -> None:
        pass

    def current(self) -> dict[str, Any] | None:
        if self.reads == 0 and not self.created:
            return None
        found = self.states[min(self.reads, len(self.states)) - 1] if self.states else None
        return found if isinstance(found, dict) else None

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.nodes

    def list_pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        mine = self.current()
        return [*self.others, *([mine] if mine else [])]

    def get_node(self, name: str) -> dict[str, Any]:
        for found in self.nodes:
            if found["metadata"]["name"] == name:
                return found
        raise ClusterError(f'get node {name}: 404 nodes "{name}" not found', code=404)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        found = self.states[min(self.reads, len(self.states)) - 1]
        if isinstance(found, Exception):
            raise found
        return found

    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.events

    def logs(self, namespace: str, name: str, **_: Any) -> str:
        # What the API server answers when no kubelet serves the node's logs (kwok's nodes).
        raise ClusterError(
            f"read logs of pod {namespace}/{name}: 500 Get "
            '"https://10.0.0.2:10250/containerLogs/team-a/train/main": dial tcp '
            "10.0.0.2:10250: connect: connection refused",
            code=500,
            status={"kind": "Status", "code": 500},
        )

    def create_pod(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        self.created.append(manifest)
        return {**manifest, "metadata": {**manifest["metadata"], "name": "train"}}


@pytest.fixture
def connect(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make every ``Client`` of the test connect to the cluster given (namespace team-a)."""

    def to(cluster: Cluster) -> Cluster:
        monkeypatch.setattr(
            Workloads, "connect", staticmethod(lambda kubeconfig=None: (cluster, "team-a"))
        )
        monkeypatch.delenv("VSLICE_NAMESPACE", raising=False)
        return cluster

    return to


# --- Workload.wait ---------------------------------------------------------------------------


def test_an_image_that_cannot_be_pulled_ends_the_wait_at_once_with_kubernetes_words(
    connect: Any,
) -> None:
    connect(Cluster(lab_nodes(), [state("Pending", "lab-l4"), pull_back_off()]))
    started = time.monotonic()
    with pytest.raises(Stalled) as caught:
        vslice.Client().workload("train").wait(60)
    assert time.monotonic() - started < 10  # not at the 60 s deadline
    assert (caught.value.reason, caught.value.pod) == ("ImagePullBackOff", "team-a/train")
    assert str(caught.value) == (
        "pod team-a/train will not be running: container main cannot pull its image 'nope:1': "
        'ImagePullBackOff: Back-off pulling image "nope:1"; give an image lab-l4 can pull (for '
        "the local lab's real node: `vslice lab import-image FILE.tar`)"
    )
    assert isinstance(caught.value, ClusterError)


def test_waiting_for_completion_on_a_simulated_node_ends_at_once_naming_a_real_node(
    connect: Any,
) -> None:
    connect(Cluster(lab_nodes(), [state("Running", "lab-a100")]))
    with pytest.raises(Stalled) as caught:
        vslice.Client().workload("train").wait(60, until="completed")
    assert str(caught.value) == (
        "pod team-a/train will not be completed: it runs on lab-a100, a node kwok simulates: "
        "its containers never really run, so it never completes and has no logs; wait "
        "until='running' (it is), or run it on a real GPU node: lab-l4 (NVIDIA-L4) (ask for "
        "that GPU type)"
    )


def test_running_on_a_simulated_node_is_still_running(connect: Any) -> None:
    connect(Cluster(lab_nodes(), [state("Running", "lab-a100")]))
    workload = vslice.Client().workload("train")
    assert workload.wait(5) is workload


def test_an_unschedulable_pod_is_reported_once_with_vslices_why_not_then_times_out(
    connect: Any,
) -> None:
    nodes, others = cluster_objects()
    connect(Cluster(nodes, [unschedulable(100 * 1024)], others=others))
    said: list[str] = []
    with pytest.raises(Timeout) as caught:
        vslice.Client().workload("train").wait(0.6, report=said.append)
    scheduler = (
        "not scheduled: Unschedulable: 0/2 nodes are available: 2 node(s) did not fit "
        "(vslice extender).; vslice: does not fit: asks 100 GiB per GPU; the largest GPU here "
        "has 80 GiB"
    )
    assert len(said) == 1 and said[0].startswith(f"Pod team-a/train: {scheduler}")
    assert str(caught.value).startswith(
        f"Pod team-a/train is not running after 0.6s: phase Pending, no node yet; {scheduler}"
    )


def test_a_timeout_without_a_cause_in_the_status_names_the_newest_warning_event(
    connect: Any,
) -> None:
    event = {"type": "Warning", "reason": "FailedMount", "message": 'secret "data" not found'}
    connect(Cluster(lab_nodes(), [state("Pending", "lab-l4")], events=[event]))
    with pytest.raises(Timeout) as caught:
        vslice.Client().workload("train").wait(0.3)
    assert str(caught.value) == (
        "Pod team-a/train is not running after 0.3s: phase Pending on lab-l4; last warning "
        'event: FailedMount: secret "data" not found'
    )


def test_a_pod_deleted_during_the_wait_says_so(connect: Any) -> None:
    gone = ClusterError('get pod team-a/train: 404 pods "train" not found', code=404)
    connect(Cluster(lab_nodes(), [state("Pending"), gone]))
    with pytest.raises(ClusterError) as caught:
        vslice.Client().workload("train").wait(30)
    assert str(caught.value) == "pod team-a/train was deleted before it was running"
    assert caught.value.code == 404


# --- Workload.logs -------------------------------------------------------------------------


def test_logs_on_a_simulated_node_are_one_clear_line_keeping_the_apis_code(
    connect: Any,
) -> None:
    connect(Cluster(lab_nodes(), [state("Running", "lab-a100")]))
    with pytest.raises(ClusterError) as caught:
        vslice.Client().workload("train").logs()
    assert str(caught.value) == (
        "no logs of pod team-a/train: it runs on lab-a100, a node kwok simulates: its "
        "containers never really run, so it never completes and has no logs; for real output "
        "run it on a real GPU node: lab-l4 (NVIDIA-L4) (ask for that GPU type) (the API server "
        "answered 500)"
    )
    assert caught.value.code == 500 and caught.value.status == {"kind": "Status", "code": 500}


def test_a_logs_failure_without_a_known_cause_is_the_apis_own(connect: Any) -> None:
    connect(Cluster(lab_nodes(), [state("Running", "lab-l4")]))
    with pytest.raises(ClusterError) as caught:
        vslice.Client().workload("train").logs()
    assert str(caught.value).startswith("read logs of pod team-a/train: 500 Get")


# --- vslice request --queue and vslice allocations ------------------------------------------


def test_request_queue_of_a_slice_that_can_never_fit_says_so_at_once_and_does_not_wait(
    connect: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, others = cluster_objects()
    cluster = connect(Cluster(nodes, [unschedulable(100 * 1024)], others=others))
    status = main(["request", "--queue", "--memory", "100Gi", "busybox"])
    out, err = capsys.readouterr()
    assert status == 1 and len(cluster.created) == 1 and cluster.reads == 0
    assert out == "created pod team-a/train\n"
    lines = err.splitlines()
    assert lines[0] == (
        "vslice request: it can never fit the GPUs this cluster has, even with every GPU "
        "free; queued anyway (--queue): it stays Pending until the cluster changes"
    )
    assert lines[1] == "does not fit: asks 100 GiB per GPU; the largest GPU here has 80 GiB"
    assert lines[-1] == (
        "vslice request: not waiting for it to be running: it cannot be placed on these GPUs; "
        "`vslice why train -n team-a` follows it, `vslice delete train -n team-a` removes it"
    )


def test_request_queue_of_a_slice_that_fits_later_says_why_now_then_waits_and_reports(
    connect: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, others = cluster_objects()  # node-b's T4: 15 GiB, 10 GiB held by team-b/small
    cluster = connect(Cluster(nodes, [unschedulable(10240)], others=others))
    argv = ["request", "--queue", "--timeout", "0.5", "--memory", "10Gi", "--gpu-type", "T4"]
    status = main([*argv, "busybox"])
    err = capsys.readouterr().err.splitlines()
    assert status == 1 and len(cluster.created) == 1
    assert err[0] == (
        "vslice request: it does not fit now; queued anyway (--queue): it waits until other "
        "pods give room back"
    )
    waiting = [line for line in err if line.startswith("vslice request: waiting: ")]
    assert len(waiting) == 1 and "not scheduled: Unschedulable: 0/2 nodes" in waiting[0]
    assert err[-1].startswith("vslice request: Pod team-a/train is not running after 0.5s")


def test_allocations_show_a_pod_being_deleted_as_terminating(
    connect: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, others = cluster_objects()
    others[0]["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    connect(Cluster(nodes, others=others))
    assert main(["allocations", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["pod"], r["phase"]) for r in rows} == {
        ("train", "Terminating"),
        ("infer", "Running"),
        ("small", "Running"),
    }
