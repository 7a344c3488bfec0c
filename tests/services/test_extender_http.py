"""The extender over HTTP: filter, prioritize, bind and metrics calls as kube-scheduler makes them.

The server is the real one (the extender's routes on ``HttpService``); its ledger is fed
through the same watch handlers as in production, with Node and Pod objects shaped as the API
server sends them. Binds that reach the API server are covered by the end-to-end tests.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from served import Reply, call
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.main import routes
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.verbs import Extender
from vslice_core.annotations import ALLOCATION, NODE_GPUS, encode_allocation, encode_node_gpus
from vslice_core.ledger import Ledger
from vslice_core.model import Allocation, ContainerAllocation, Gpu, GpuGrant, NodeInventory
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_serving.httpserve import HttpService

GPU, MEM, CORES = (
    DEFAULT_RESOURCE_NAMES.gpu,
    DEFAULT_RESOURCE_NAMES.memory,
    DEFAULT_RESOURCE_NAMES.cores,
)
GIB = 1024


def node(name: str, *memories: int, slots: int = 4) -> dict[str, Any]:
    """A Node object whose inventory annotation lists GPUs of these sizes (MiB)."""
    gpus = [
        Gpu(uuid=f"GPU-{name}-{i}", model="NVIDIA-A100", memory_mib=mib, slots=slots, index=i)
        for i, mib in enumerate(memories)
    ]
    value = encode_node_gpus(NodeInventory(name=name, gpus=gpus))
    return {"metadata": {"name": name, "annotations": {NODE_GPUS: value}}}


def pod(
    name: str, annotations: dict[str, str] | None = None, node: str = "", **limits: str
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if annotations:
        metadata["annotations"] = annotations
    resources = {
        "limits": {{"gpu": GPU, "mem": MEM, "cores": CORES}[k]: v for k, v in limits.items()}
    }
    return {
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": resources}]},
        "status": {"phase": "Pending"},
    }


def allocation_on(node_name: str, gpu_index: int, memory_mib: int, cores: int = 0) -> str:
    grant = GpuGrant(
        uuid=f"GPU-{node_name}-{gpu_index}", index=gpu_index, memory_mib=memory_mib, cores=cores
    )
    return encode_allocation(
        Allocation(node=node_name, containers=[ContainerAllocation(name="main", gpus=[grant])])
    )


class ExtenderUnderTest:
    def __init__(self, port: int, ledger: Ledger, nodes: NodeFeed, pods: PodFeed) -> None:
        self.port, self.ledger, self.nodes, self.pods = port, ledger, nodes, pods

    def post(self, verb: str, body: bytes | dict[str, Any]) -> Reply:
        return call(self.port, "POST", f"/{verb}", body)

    def filter(self, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
        reply = self.post("filter", {"Pod": pod, "NodeNames": names})
        assert reply.status == 200, reply.body
        result: dict[str, Any] = reply.json()
        return result

    def metrics(self) -> str:
        return call(self.port, "GET", "/metrics").body.decode()


Start = Callable[..., ExtenderUnderTest]


@pytest.fixture
def start() -> Iterator[Start]:
    services: list[HttpService] = []

    def started(*, synced: bool = True, hold_ttl: float = 60.0) -> ExtenderUnderTest:
        ledger = Ledger()
        holds = Holds(ttl_seconds=hold_ttl)
        metrics = ExtenderMetrics(ledger)
        verbs = Extender(
            ledger, holds, None, metrics, names=DEFAULT_RESOURCE_NAMES, synced=lambda: synced
        )
        nodes, pods = NodeFeed(ledger), PodFeed(ledger, holds)
        nodes.replace(
            [node("n1", 80 * GIB), node("n2", 80 * GIB, 80 * GIB), {"metadata": {"name": "cpu"}}]
        )
        pods.replace([])
        service = HttpService(("127.0.0.1", 0), routes(verbs, metrics, lambda: synced))
        service.start()
        services.append(service)
        return ExtenderUnderTest(service.port, ledger, nodes, pods)

    yield started
    for service in services:
        service.stop()


@pytest.fixture
def extender(start: Start) -> ExtenderUnderTest:
    return start()


def test_filter_answers_one_fitting_node_among_the_names_sent(extender: ExtenderUnderTest) -> None:
    result = extender.filter(pod("a", mem="30720"), ["n2", "n1"])
    assert result["Error"] == ""
    assert len(result["NodeNames"]) == 1 and result["NodeNames"][0] in ("n1", "n2")
    assert result["FailedAndUnresolvableNodes"] == {}


def test_filter_never_answers_a_node_that_was_not_sent(extender: ExtenderUnderTest) -> None:
    assert extender.filter(pod("a", mem="1024"), ["n2"])["NodeNames"] == ["n2"]
    assert extender.filter(pod("b", mem="1024"), [])["NodeNames"] == []


def test_filter_with_whole_node_objects_answers_node_objects(extender: ExtenderUnderTest) -> None:
    sent = [{"metadata": {"name": "n1", "labels": {"zone": "a"}}}, {"metadata": {"name": "n2"}}]
    reply = extender.post("filter", {"Pod": pod("a", mem="70000"), "Nodes": {"items": sent}})
    result = reply.json()
    assert result["NodeNames"] is None
    assert len(result["Nodes"]["items"]) == 1
    assert result["Nodes"]["items"][0] in sent


def test_filter_explains_every_node_that_cannot_take_the_pod(extender: ExtenderUnderTest) -> None:
    result = extender.filter(pod("huge", mem=str(90 * GIB)), ["n1", "n2", "cpu", "ghost"])
    assert result["NodeNames"] == []
    failed = result["FailedAndUnresolvableNodes"]
    assert failed["n1"] == "vslice: insufficient_memory x1"
    assert failed["n2"] == "vslice: insufficient_memory x2"
    assert "too_few_gpus" in failed["cpu"] and "too_few_gpus" in failed["ghost"]


def test_filter_holds_the_chosen_slices_for_the_next_pod(extender: ExtenderUnderTest) -> None:
    assert extender.filter(pod("first", mem=str(60 * GIB)), ["n1"])["NodeNames"] == ["n1"]
    second = extender.filter(pod("second", mem=str(60 * GIB)), ["n1"])
    assert second["NodeNames"] == []
    assert second["FailedAndUnresolvableNodes"]["n1"] == "vslice: insufficient_memory x1"
    # the first pod asked again (a retry) still fits: its own hold does not count against it
    assert extender.filter(pod("first", mem=str(60 * GIB)), ["n1"])["NodeNames"] == ["n1"]


def test_a_hold_without_a_bind_expires(start: Start) -> None:
    extender = start(hold_ttl=0.0)
    assert extender.filter(pod("first", mem=str(60 * GIB)), ["n1"])["NodeNames"] == ["n1"]
    assert extender.filter(pod("second", mem=str(60 * GIB)), ["n1"])["NodeNames"] == ["n1"]


def test_an_invalid_request_names_the_field_and_the_value(extender: ExtenderUnderTest) -> None:
    result = extender.filter(pod("bad", gpu="1", cores="120"), ["n1", "n2"])
    assert result["NodeNames"] == []
    message = result["FailedAndUnresolvableNodes"]["n1"]
    assert "nvidia.com/gpucores" in message and "120" in message


def test_a_pod_without_a_gpu_request_passes_every_node(extender: ExtenderUnderTest) -> None:
    plain = pod("plain")
    plain["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert extender.filter(plain, ["n1", "cpu"])["NodeNames"] == ["n1", "cpu"]


def test_filter_asks_for_a_retry_until_the_ledger_is_loaded(start: Start) -> None:
    extender = start(synced=False)
    result = extender.filter(pod("a", mem="1024"), ["n1"])
    assert result["NodeNames"] == [] and "retry" in result["Error"]
    assert call(extender.port, "GET", "/readyz").status == 503


@pytest.mark.parametrize(
    ("verb", "body", "expected"),
    [
        ("filter", b"{", "not JSON"),
        ("filter", b'{"Pod": 1, "NodeNames": []}', "Pod must be a Pod object"),
        ("filter", b'{"Pod": {"metadata": {}}}', "NodeNames or Nodes"),
        ("filter", b'{"Pod": {"metadata": {}}, "NodeNames": [1]}', "NodeNames must be a list"),
        ("prioritize", b"[]", "JSON object"),
        ("bind", b'{"PodName": "a", "PodNamespace": "d", "Node": "n1"}', "PodUID"),
    ],
)
def test_a_malformed_call_gets_a_400_that_says_what_is_wrong(
    extender: ExtenderUnderTest, verb: str, body: bytes, expected: str
) -> None:
    reply = extender.post(verb, body)
    assert reply.status == 400
    assert expected in reply.body.decode()
    assert call(extender.port, "GET", "/healthz").body == b"ok"


def test_prioritize_scores_the_node_the_filter_chose(extender: ExtenderUnderTest) -> None:
    chosen = extender.filter(pod("a", mem="1024"), ["n1", "n2"])["NodeNames"][0]
    reply = extender.post("prioritize", {"Pod": pod("a", mem="1024"), "NodeNames": ["n1", "n2"]})
    scores = {entry["Host"]: entry["Score"] for entry in reply.json()}
    assert scores[chosen] == 10
    assert sorted(scores.values()) == [0, 10]


def test_a_bind_without_cluster_access_answers_an_error_not_a_crash(
    extender: ExtenderUnderTest,
) -> None:
    body = {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n1"}
    reply = extender.post("bind", body)
    assert reply.status == 200
    assert "no cluster access" in reply.json()["Error"]


def test_metrics_show_usage_per_gpu_decisions_and_latency(extender: ExtenderUnderTest) -> None:
    extender.filter(pod("a", mem="30000"), ["n1"])
    extender.filter(pod("b", mem=str(90 * GIB)), ["n1"])
    text = extender.metrics()
    samples = {
        sample.name: sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("gpu") == "GPU-n1-0"
    }
    gpu = {"node": "n1", "gpu": "GPU-n1-0", "index": "0", "model": "NVIDIA-A100"}
    assert samples["vslice_gpu_allocated_memory_bytes"].labels == {**gpu, "path": "extender"}
    assert samples["vslice_gpu_allocated_memory_bytes"].value == 30000 * 1024 * 1024
    assert samples["vslice_gpu_allocated_slots"].value == 1
    assert 'vslice_extender_decisions_total{reason="none",result="fit",verb="filter"} 1.0' in text
    assert 'reason="insufficient_memory",result="nofit",verb="filter"} 1.0' in text
    assert "vslice_extender_filter_seconds_count 2.0" in text
    assert "vslice_extender_bind_seconds_bucket" in text


def test_allocations_read_from_pods_count_until_the_pod_is_gone(
    extender: ExtenderUnderTest,
) -> None:
    holder = pod("holder", {ALLOCATION: allocation_on("n1", 0, 60 * GIB)}, "n1", mem=str(60 * GIB))
    extender.pods.apply("ADDED", holder)
    big = pod("big", mem=str(60 * GIB))
    assert extender.filter(big, ["n1"])["NodeNames"] == []
    holder["status"]["phase"] = "Succeeded"
    extender.pods.apply("MODIFIED", holder)
    assert extender.filter(big, ["n1"])["NodeNames"] == ["n1"]


def test_a_deleted_pod_gives_its_slices_back(extender: ExtenderUnderTest) -> None:
    holder = pod("holder", {ALLOCATION: allocation_on("n1", 0, 60 * GIB)}, "n1")
    extender.pods.apply("ADDED", holder)
    extender.pods.apply("DELETED", holder)
    assert extender.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 0


def test_a_malformed_allocation_never_erases_a_recorded_one(extender: ExtenderUnderTest) -> None:
    holder = pod("holder", {ALLOCATION: allocation_on("n1", 0, 60 * GIB)}, "n1")
    extender.pods.apply("ADDED", holder)
    for garbage in ("{not json", '{"version": 7}', "[]"):
        holder["metadata"]["annotations"][ALLOCATION] = garbage
        extender.pods.apply("MODIFIED", holder)
    assert extender.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 60 * GIB
    assert extender.filter(pod("big", mem=str(60 * GIB)), ["n1"])["NodeNames"] == []


def test_a_malformed_node_inventory_leaves_the_node_out_without_a_crash(
    extender: ExtenderUnderTest,
) -> None:
    extender.nodes.apply(
        "MODIFIED", {"metadata": {"name": "n1", "annotations": {NODE_GPUS: "{oops"}}}
    )
    result = extender.filter(pod("a", mem="1024"), ["n1"])
    assert result["NodeNames"] == []
    assert "too_few_gpus" in result["FailedAndUnresolvableNodes"]["n1"]
    extender.nodes.apply("MODIFIED", node("n1", 80 * GIB))
    assert extender.filter(pod("a", mem="1024"), ["n1"])["NodeNames"] == ["n1"]


def test_a_rebuilt_ledger_equals_the_one_it_replaces(extender: ExtenderUnderTest) -> None:
    pods = [
        pod("p1", {ALLOCATION: allocation_on("n1", 0, 10 * GIB, 20)}, "n1"),
        pod("p2", {ALLOCATION: allocation_on("n2", 1, 30 * GIB, 50)}, "n2"),
    ]
    nodes = [node("n1", 80 * GIB), node("n2", 80 * GIB, 80 * GIB)]
    extender.nodes.replace(nodes)
    extender.pods.replace(pods)
    rebuilt = Ledger()
    PodFeed(rebuilt, Holds()).replace(pods)  # pods first: allocations wait for their node
    NodeFeed(rebuilt).replace(nodes)
    for name in ("n1", "n2"):
        assert rebuilt.gpu_usage(name) == extender.ledger.gpu_usage(name)
    assert rebuilt.gpu_usage("n2")["GPU-n2-1"].cores == 50


def test_a_relist_drops_allocations_of_pods_that_vanished(extender: ExtenderUnderTest) -> None:
    extender.pods.replace([pod("p1", {ALLOCATION: allocation_on("n1", 0, 10 * GIB)}, "n1")])
    extender.pods.replace([])
    assert extender.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 0


def test_an_allocation_on_a_pod_that_is_not_bound_books_nothing(
    extender: ExtenderUnderTest,
) -> None:
    # vslice writes it only with the Binding: on a pending pod it comes from someone else
    extender.pods.apply("ADDED", pod("orphan", {ALLOCATION: allocation_on("n1", 0, 60 * GIB)}))
    assert extender.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 0


def test_memory_in_the_apiservers_canonical_form_counts_mib(extender: ExtenderUnderTest) -> None:
    # a pod written with 70000 (MiB) reads back from the API server as "70k"
    assert extender.filter(pod("a", mem="70k"), ["n1"])["NodeNames"] == ["n1"]
    assert extender.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 70000
    result = extender.filter(pod("b", mem="90k"), ["n2"])
    assert result["FailedAndUnresolvableNodes"]["n2"] == "vslice: insufficient_memory x2"


def test_keep_alive_calls_are_answered_without_waiting_for_delayed_acks(
    extender: ExtenderUnderTest,
) -> None:
    # kube-scheduler reuses one connection; a response split over two writes must not wait
    # for the client's delayed ACK (40 ms a call, which caps scheduling at 25 pods/s).
    conn = http.client.HTTPConnection("127.0.0.1", extender.port, timeout=10)
    body = json.dumps({"Pod": pod("a", mem="1"), "NodeNames": ["n1"]}).encode()
    started = time.perf_counter()
    for _ in range(50):
        conn.request("POST", "/prioritize", body=body, headers={"Content-Type": "application/json"})
        conn.getresponse().read()
    conn.close()
    assert time.perf_counter() - started < 1.5
