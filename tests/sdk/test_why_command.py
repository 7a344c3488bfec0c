"""``vslice why POD``: where one pod's slice landed, or why it has none, without a cluster.

The cluster is the small one of ``api_objects`` (node-a: 2 A100s of 80 GiB, node-b: 1 T4 of
15 GiB) read through the real ``Client`` and ``Workload``: only the Kubernetes calls
(:class:`FakeCalls`, what ``vslice_kube.workloads.Workloads`` does) are replaced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from api_objects import NoKueue, cluster_objects
from dra_objects import claim, claim_spec, device, dra_pod, resource_slice, result
from dra_objects import template as claim_template
from vslice.cli import main
from vslice.commands import top, why
from vslice.snapshot import ClusterSnapshot
from vslice_core.errors import ClusterError
from vslice_kube.workloads import JOB_NAME_LABEL, Workloads

NOT_SCHEDULED = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/2 nodes are available: 2 node(s) did not fit (vslice extender).",
}


def waiting(
    namespace: str, name: str, memory_mib: int, *, conditions: Sequence[dict[str, str]] = ()
) -> dict[str, Any]:
    """A pod asking 1 GPU with ``memory_mib``, not scheduled yet."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory_mib)}
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending", "conditions": list(conditions)},
    }


def plain(namespace: str, name: str, node: str = "node-a") -> dict[str, Any]:
    """A pod asking no GPU at all."""
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "nginx"}]},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }


class FakeCalls:
    """The Kubernetes calls ``Client`` and ``Workload`` make, answered from lists."""

    kueue = NoKueue()

    def __init__(
        self,
        nodes: list[dict[str, Any]],
        pods: list[dict[str, Any]],
        slices: Sequence[dict[str, Any]] = (),
        claims: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.nodes, self.pods = nodes, pods
        self.slices, self.claims = list(slices), list(claims)
        self.dra_unavailable: str | None = None
        self.asked: list[str] = []

    def close(self) -> None:
        pass

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.nodes

    def list_pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [p for p in self.pods if namespace in (None, p["metadata"]["namespace"])]

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        return self.slices

    def list_resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.claims

    def get_resource_claim_template(self, namespace: str, name: str) -> None:
        return None

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.asked.append(f"pod {namespace}/{name}")
        for pod in self.pods:
            if (pod["metadata"]["namespace"], pod["metadata"]["name"]) == (namespace, name):
                return pod
        raise ClusterError(f'get pod {namespace}/{name}: 404 pods "{name}" not found', code=404)

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        self.asked.append(f"job {namespace}/{job}")
        return [
            p
            for p in self.list_pods(namespace)
            if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == job
        ]


def the_cluster() -> FakeCalls:
    nodes, pods = cluster_objects()
    nodes[0]["status"] = {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
    pods += [
        waiting("team-c", "big", 92160, conditions=[NOT_SCHEDULED]),
        waiting("team-c", "small", 1024),
        plain("team-a", "web"),
    ]
    return FakeCalls(nodes, pods)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCalls:
    """The cluster every ``Client`` of the test connects to (default namespace team-a)."""
    calls = the_cluster()
    monkeypatch.setattr(
        Workloads, "connect", staticmethod(lambda kubeconfig=None: (calls, "team-a"))
    )
    monkeypatch.delenv("VSLICE_NAMESPACE", raising=False)
    return calls


def run_why(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    status = main(["why", *argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


# --- pending: why it does not fit, with numbers ---------------------------------------------


def test_a_pending_pod_that_does_not_fit_says_why_per_node_and_what_kube_scheduler_said(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run_why(["big", "-n", "team-c"], capsys)
    assert (status, err) == (0, "")
    assert lines == [
        "pod team-c/big: Pending, no node yet, asks 1 GPU with 90 GiB",
        "does not fit: asks 90 GiB per GPU; the largest GPU here has 80 GiB",
        "  node-a: its largest GPU has 80 GiB, asks 90 GiB (memory, x2)",
        "  node-b: its largest GPU has 15 GiB, asks 90 GiB (memory)",
        "would fit now: 1 GPU with 80 GiB on node-a (GPU 1)",
        "kube-scheduler: Unschedulable: 0/2 nodes are available: 2 node(s) did not fit "
        "(vslice extender).",
    ]


def test_the_cause_is_the_one_vslice_top_shows_for_the_same_pod(cluster: FakeCalls) -> None:
    snapshot = ClusterSnapshot.read(cluster.nodes, cluster.pods)
    (big,) = [p for p in cluster.pods if p["metadata"]["name"] == "big"]
    said = why.answer(big, snapshot)
    (line,) = [line for line in top.pending_lines(snapshot) if line.pod == "team-c/big"]
    assert said.why is not None and said.why.one_line() == line.why
    assert said.asks == line.asks == "1 GPU with 90 GiB"


def test_a_pending_pod_that_fits_now_says_where_and_that_kube_scheduler_has_not_spoken(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, _ = run_why(["small", "-n", "team-c"], capsys)
    assert status == 0
    assert lines[0] == "pod team-c/small: Pending, no node yet, asks 1 GPU with 1 GiB"
    assert lines[1].startswith("would fit now on node-b (GPU 0): the GPUs have room for it")
    assert lines[2] == "kube-scheduler: no word on it yet (the pod has no PodScheduled condition)"


def test_json_of_a_pending_pod_carries_the_decision_and_the_scheduler_word(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["why", "big", "-n", "team-c", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["state"], found["fits"], found["node"], found["path"]) == (
        "pending",
        False,
        None,
        "extender",
    )
    assert found["why_not"].splitlines()[0] == (
        "does not fit: asks 90 GiB per GPU; the largest GPU here has 80 GiB"
    )
    assert found["suggestions"] == ["1 GPU with 80 GiB on node-a (GPU 1)"]
    assert found["scheduler"] == {"reason": "Unschedulable", "message": NOT_SCHEDULED["message"]}


# --- placed: node, GPU, memory, cores ---------------------------------------------------------


def test_a_running_pod_says_its_node_gpu_memory_cores_and_who_shares_the_gpu(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run_why(["train"], capsys)  # team-a: the kubeconfig's namespace
    assert (status, err) == (0, "")
    assert lines == [
        "pod team-a/train: Running on node node-a (10.0.0.1), extender path "
        "(vslice.io/allocation annotation)",
        "  main: GPU 0 (GPU-node-a-0, NVIDIA-A100-SXM4-80GB): memory 40.0 GiB, cores 50%",
        "  GPU 0 of node-a altogether: memory 60.0/80.0 GiB, cores 80/100%, slots 2/4 "
        "allocated; also held by team-b/infer",
    ]
    assert cluster.asked == ["pod team-a/train"]


def test_json_of_a_running_pod_has_its_grants_and_gpus(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["why", "small", "--namespace", "team-b", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["state"], found["node"], found["address"], found["fits"]) == (
        "placed",
        "node-b",
        None,
        None,
    )
    (grant,) = found["grants"]
    assert (grant["gpu_uuid"], grant["gpu_index"], grant["memory_mib"], grant["cores"]) == (
        "GPU-node-b-0",
        0,
        10240,
        20,
    )
    (gpu,) = found["gpus"]
    # done (Succeeded) gave its 5 GiB back: only small's 10 GiB counts.
    assert (gpu["memory_used_mib"], gpu["memory_mib"], gpu["pods"]) == (
        10240,
        15360,
        ["team-b/small"],
    )


def test_a_finished_pod_holds_nothing(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, _ = run_why(["done", "-n", "team-b"], capsys)
    assert status == 0
    assert lines == [
        "pod team-b/done: Succeeded on node node-b; a finished pod holds no GPU slice "
        "(what it held is free again)"
    ]


def test_a_bound_pod_without_an_allocation_is_not_counted_and_says_why() -> None:
    nodes, pods = cluster_objects()
    bound = waiting("team-c", "bypass", 2048)
    bound["spec"]["nodeName"] = "node-b"
    bound["status"] = {"phase": "Running"}
    said = why.answer(bound, ClusterSnapshot.read(nodes, [*pods, bound]))
    assert said.state == "unplaced"
    (line,) = why.lines(said)
    assert line.startswith(
        "pod team-c/bypass: Running on node node-b, asks 1 GPU with 2 GiB, but holds no vslice "
        "slice: it carries no vslice.io/allocation annotation"
    )


# --- no slice asked, no such pod ---------------------------------------------------------------


def test_a_pod_without_a_gpu_request_says_so_and_how_to_ask(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, _ = run_why(["web", "-n", "team-a"], capsys)
    assert status == 0
    assert lines == [
        "pod team-a/web: Running on node node-a (10.0.0.1); it asks for no GPU slice (no "
        "container has a limit of nvidia.com/gpu, nvidia.com/gpumem, "
        "nvidia.com/gpumem-percentage or nvidia.com/gpucores, and no ResourceClaim of "
        "gpu.vslice.io is allocated to it or waiting for it)",
        why.HOW_TO_ASK,
    ]


def test_a_missing_pod_exits_1_naming_it_and_its_namespace_without_a_traceback(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run_why(["ghost", "-n", "team-z"], capsys)
    assert (status, lines) == (1, [])
    assert err == (
        "vslice why: no pod named 'ghost' in namespace 'team-z', nor a pod of a Job of that "
        "name; `kubectl get pods -n team-z` lists the pods there, and -n NAMESPACE looks in "
        "another namespace\n"
    )
    assert cluster.asked == ["pod team-z/ghost", "job team-z/ghost"]


def test_another_cluster_error_is_one_line_and_exits_1(
    cluster: FakeCalls, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def forbidden(namespace: str, name: str) -> dict[str, Any]:
        raise ClusterError(f"get pod {namespace}/{name}: 403 forbidden", code=403)

    monkeypatch.setattr(cluster, "get_pod", forbidden)
    status, lines, err = run_why(["train"], capsys)
    assert (status, lines, err) == (1, [], "vslice why: get pod team-a/train: 403 forbidden\n")


def test_a_name_that_cannot_be_a_pod_exits_2(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run_why(["My_Pod"], capsys)
    assert status == 2
    assert err.startswith("vslice why: POD must be a DNS label") and "'My_Pod'" in err
    assert cluster.asked == []


def test_a_jobs_name_explains_its_newest_pod(
    cluster: FakeCalls, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = waiting("team-c", "train-job-x7k2p", 92160)
    pod["metadata"]["labels"] = {JOB_NAME_LABEL: "train-job"}
    cluster.pods.append(pod)
    status, lines, _ = run_why(["train-job", "-n", "team-c"], capsys)
    assert status == 0
    assert lines[:2] == [
        "Job team-c/train-job: its newest pod is team-c/train-job-x7k2p",
        "pod team-c/train-job-x7k2p: Pending, no node yet, asks 1 GPU with 90 GiB",
    ]


# --- the DRA path ----------------------------------------------------------------------------


def dra_snapshot(
    *pods: dict[str, Any],
    claims: Sequence[dict[str, Any]] = (),
    templates: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> ClusterSnapshot:
    """node-a and node-b by annotation, node-c (2 A100s) by its ResourceSlice only."""
    nodes, _ = cluster_objects()
    slices = [resource_slice("node-c", [device(0, "GPU-c-0"), device(1, "GPU-c-1")])]
    return ClusterSnapshot.read(nodes, list(pods), slices, list(claims), templates=templates)


def test_a_pod_sharing_a_claim_says_where_and_with_whom() -> None:
    shared = claim(
        "team-d",
        "shared",
        results=[result("node-c", "gpu-1")],
        reserved=[("reader-1", "u-r1"), ("reader-2", "u-r2")],
    )
    first = dra_pod("team-d", "reader-1", node="node-c", claim_name="shared")
    second = dra_pod("team-d", "reader-2", node="node-c", claim_name="shared")
    said = why.answer(second, dra_snapshot(first, second, claims=[shared]))
    assert (said.state, said.node, said.path, said.claims, said.shared_with) == (
        "placed",
        "node-c",
        "dra",
        ("team-d/shared",),
        ("team-d/reader-1",),
    )
    assert why.lines(said)[:2] == [
        "pod team-d/reader-2: Running on node node-c, DRA path, ResourceClaim team-d/shared, "
        "shared with team-d/reader-1",
        "  main: GPU 1 (GPU-c-1, NVIDIA-A100-SXM4-80GB): memory 8.0 GiB, cores 30%",
    ]


def test_a_pending_dra_pod_says_kube_scheduler_places_it() -> None:
    big = claim_template("team-d", "vslice-big", claim_spec(memory="90Gi", cores=None))
    pod = dra_pod("team-d", "big", phase="Pending", template_name="vslice-big")
    snapshot = dra_snapshot(pod, templates={("team-d", "vslice-big"): big})
    lines = why.lines(why.answer(pod, snapshot))
    assert lines[0] == "pod team-d/big: Pending, no node yet, asks 1 GPU with 90 GiB (DRA claim)"
    assert lines[1] == "does not fit: asks 90 GiB per GPU; the largest GPU here has 80 GiB"
    assert any(line.startswith("on the DRA path kube-scheduler's DRA allocator") for line in lines)


def test_a_dra_pod_whose_template_is_missing_says_what_to_create() -> None:
    pod = dra_pod("team-d", "lost", phase="Pending", template_name="nope")
    said = why.answer(pod, dra_snapshot(pod, templates={}))
    assert said.state == "unreadable"
    (line,) = why.lines(said)
    assert line.startswith("pod team-d/lost: Pending, no node yet; vslice cannot read the GPU")
    assert "ResourceClaimTemplate team-d/nope, which does not exist: create it" in line
