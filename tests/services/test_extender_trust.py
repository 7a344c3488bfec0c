"""The extender and state it did not write: signed allocations, unproven or unreadable ones,
over-booked GPUs, a GPU UUID on two nodes, holds for pods that do not exist.

The extender is the real HTTP server with its routes; the ledger is fed through the real
watch handlers with Pod and Node objects shaped as the API server sends them; binds go to a
fake cluster that records the Binding's annotations.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from served import Reply, call
from test_extender_http import GIB, allocation_on, node, pod
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.main import routes
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.trust import Proofs, Reports
from vslice_control.extender.verbs import Extender
from vslice_core.annotations import ALLOCATION, BIND_TIME
from vslice_core.ledger import Ledger
from vslice_core.proof import PROOF, Key, check, sign
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_kube.nodelock import Held
from vslice_serving.httpserve import HttpService

OLD = Key("k1", b"o" * 32)
NEW = Key("k2", b"n" * 32)


@dataclass
class RecordedEvents:
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (kind/name, reason, msg)

    def pod(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self.seen.append((f"Pod/{namespace}/{name}", reason, message))

    def node(self, name: str, reason: str, message: str) -> None:
        self.seen.append((f"Node/{name}", reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.seen]


@dataclass
class FakeCluster:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    bound: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.pods[name]

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return []

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        self.bound[name] = (node, annotations)

    def lock_node(self, node: str) -> Held:
        return Held(node, "v", others_since=False, renew_after=time.monotonic() + 60)

    def unlock_node(self, held: Held) -> None:
        return None


@dataclass
class Served:
    port: int
    ledger: Ledger
    nodes: NodeFeed
    pods: PodFeed
    extender: Extender
    cluster: FakeCluster
    events: RecordedEvents

    def post(self, verb: str, body: dict[str, Any]) -> Reply:
        return call(self.port, "POST", f"/{verb}", body)

    def filter(self, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
        reply = self.post("filter", {"Pod": pod, "NodeNames": names})
        assert reply.status == 200, reply.body
        result: dict[str, Any] = reply.json()
        return result

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = call(self.port, "GET", "/status").json()
        return result

    def metrics(self) -> str:
        return call(self.port, "GET", "/metrics").body.decode()


@pytest.fixture
def served() -> Iterator[Served]:
    ledger, holds, events = Ledger(), Holds(), RecordedEvents()
    metrics = ExtenderMetrics(ledger)
    reports = Reports(events, metrics)
    proofs = Proofs({OLD.id: OLD, NEW.id: NEW})
    nodes, pods = NodeFeed(ledger, reports), PodFeed(ledger, holds, proofs, reports)
    metrics.count_refused(nodes.refused)
    cluster = FakeCluster()
    extender = Extender(
        ledger,
        holds,
        cluster,
        metrics,
        names=DEFAULT_RESOURCE_NAMES,
        proofs=proofs,
        pods=pods,
        unknown_pod_grace=0.3,
    )
    nodes.replace([node("n1", 16 * GIB), node("n2", 16 * GIB)])
    pods.replace([])
    service = HttpService(("127.0.0.1", 0), routes(extender, metrics, lambda: True, nodes))
    service.start()
    yield Served(service.port, ledger, nodes, pods, extender, cluster, events)
    service.stop()


def bound(name: str, node_name: str, value: str, proof: str | None = None) -> dict[str, Any]:
    """A Running pod bound to ``node_name`` carrying this allocation (and proof)."""
    annotations = {ALLOCATION: value, **({PROOF: proof} if proof else {})}
    manifest = pod(name, annotations, node=node_name, gpu="1", mem="1024")
    manifest["status"]["phase"] = "Running"
    return manifest


def signed(name: str, node_name: str, value: str, key: Key = NEW) -> dict[str, Any]:
    return bound(name, node_name, value, sign(key, f"uid-{name}", node_name, value))


def test_a_bind_signs_exactly_the_allocation_it_writes(served: Served) -> None:
    manifest = pod("a", gpu="1", mem="2048")
    served.pods.apply("ADDED", manifest)
    served.cluster.pods["a"] = manifest
    (chosen,) = served.filter(manifest, ["n1", "n2"])["NodeNames"]
    body = {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": chosen}
    assert served.post("bind", body).json() == {"Error": ""}
    node_name, annotations = served.cluster.bound["a"]
    assert set(annotations) == {ALLOCATION, BIND_TIME, PROOF}
    assert annotations[PROOF].startswith("v1:k2:")  # the last key of the file signs
    keys = {NEW.id: NEW}
    assert check(keys, annotations[PROOF], "uid-a", node_name, annotations[ALLOCATION]) is None
    assert check(keys, annotations[PROOF], "uid-b", node_name, annotations[ALLOCATION])


def test_an_allocation_signed_with_the_previous_key_counts_as_proven(served: Served) -> None:
    served.pods.apply("ADDED", signed("old", "n1", allocation_on("n1", 0, 4096), key=OLD))
    assert served.ledger.unproven("uid-old") is None
    assert served.status()["unproven_pods"] == {}
    assert served.events.seen == []


def test_an_edited_allocation_is_counted_beside_the_signed_one_and_reported(
    served: Served,
) -> None:
    original = signed("a", "n1", allocation_on("n1", 0, 8192))
    served.pods.apply("ADDED", original)
    proof = original["metadata"]["annotations"][PROOF]
    edited = bound("a", "n1", allocation_on("n1", 0, 1), proof)  # 8192 MiB -> 1, proof kept
    for _ in range(3):  # the watch replays the pod: counted and reported once
        served.pods.apply("MODIFIED", edited)
    assert served.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 8192 + 1
    assert served.status()["unproven_pods"] == {"uid-a": "n1"}
    assert served.events.reasons() == ["UnprovenAllocation"]
    assert "proof does not match" in served.events.seen[0][2]
    assert 'vslice_extender_state_problems_total{kind="unproven"} 1.0' in served.metrics()


def test_removing_a_bound_pods_allocation_frees_nothing(served: Served) -> None:
    served.pods.apply("ADDED", signed("a", "n1", allocation_on("n1", 0, 8192)))
    stripped = pod("a", node="n1", gpu="1", mem="8192")
    stripped["status"]["phase"] = "Running"
    served.pods.apply("MODIFIED", stripped)
    assert served.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 8192
    served.pods.apply("DELETED", stripped)
    assert served.ledger.gpu_usage("n1")["GPU-n1-0"].memory_mib == 0


def test_a_forged_allocation_that_overbooks_a_gpu_blocks_it_until_the_pod_is_deleted(
    served: Served,
) -> None:
    served.pods.apply("ADDED", signed("victim", "n1", allocation_on("n1", 0, 8192)))
    forged = bound("forged", "n1", allocation_on("n1", 0, 15360, 100))  # no proof at all
    served.pods.apply("ADDED", forged)
    usage = served.ledger.gpu_usage("n1")["GPU-n1-0"]
    assert usage.memory_mib == 8192 + 15360  # counted, not ignored
    assert served.status()["overbooked"] == {
        "n1": {"GPU-n1-0": {"slots": 2, "memory_mib": 23552, "cores": 100}}
    }
    assert 'vslice_gpu_overbooked{gpu="GPU-n1-0",node="n1"} 1.0' in served.metrics()
    assert served.events.reasons() == ["UnprovenAllocation", "GpuOverbooked"]
    assert served.filter(pod("next", gpu="1", mem="1024"), ["n1"])["NodeNames"] == []
    served.pods.apply("DELETED", forged)
    assert served.status()["overbooked"] == {}
    assert served.filter(pod("next", gpu="1", mem="1024"), ["n1"])["NodeNames"] == ["n1"]


def test_an_unproven_allocation_naming_another_node_counts_where_the_pod_runs(
    served: Served,
) -> None:
    served.pods.apply("ADDED", bound("forged", "n1", allocation_on("n2", 0, 4096)))
    assert served.ledger.gpu_usage("n2")["GPU-n2-0"].memory_mib == 0
    assert served.ledger.unproven("uid-forged") is not None


def test_an_unreadable_allocation_blocks_its_node_also_after_a_restart(served: Served) -> None:
    broken = bound("broken", "n1", "{not json")
    served.pods.apply("ADDED", broken)
    result = served.filter(pod("next", gpu="1", mem="1024"), ["n1"])
    assert result["NodeNames"] == []
    assert "node_blocked" in result["FailedAndUnresolvableNodes"]["n1"]
    assert list(served.status()["blocked_nodes"]) == ["n1"]
    assert 'vslice_node_blocked{node="n1"} 1.0' in served.metrics()
    assert served.events.reasons() == ["UnreadableAllocation", "UnreadableAllocation"]

    rebuilt_ledger, holds = Ledger(), Holds()  # a restarted extender: lists first
    rebuilt = PodFeed(rebuilt_ledger, holds, Proofs({NEW.id: NEW}))
    rebuilt.replace([broken])
    NodeFeed(rebuilt_ledger).replace([node("n1", 16 * GIB)])
    assert list(rebuilt_ledger.blocked_nodes()) == ["n1"]

    served.pods.apply("DELETED", broken)
    assert served.filter(pod("next", gpu="1", mem="1024"), ["n1"])["NodeNames"] == ["n1"]


def test_a_gpu_uuid_claimed_by_a_second_node_is_refused_there(served: Served) -> None:
    twin = node("n3", 16 * GIB)
    twin["metadata"]["annotations"] = node("n1", 16 * GIB)["metadata"]["annotations"]
    twin["metadata"]["name"] = "n3"
    served.nodes.apply("ADDED", twin)
    assert served.status()["refused_gpus"] == {"n3": {"GPU-n1-0": "n1"}}
    assert served.filter(pod("x", gpu="1", mem="1024"), ["n3"])["NodeNames"] == []
    assert served.events.seen[0][:2] == ("Node/n3", "DuplicateGpuUuid")
    assert 'vslice_gpu_refused{gpu="GPU-n1-0",node="n3",owner="n1"} 1.0' in served.metrics()
    served.nodes.apply("DELETED", node("n1", 16 * GIB))  # the first claim goes away
    assert served.status()["refused_gpus"] == {}
    assert served.filter(pod("x", gpu="1", mem="1024"), ["n3"])["NodeNames"] == ["n3"]
    served.nodes.apply("ADDED", node("n1", 16 * GIB))  # n3 owns it now: n1 is refused, and told
    assert served.status()["refused_gpus"] == {"n1": {"GPU-n1-0": "n3"}}
    assert served.events.seen[-1][:2] == ("Node/n1", "DuplicateGpuUuid")


def test_holds_for_pods_that_do_not_exist_are_dropped_after_the_grace(served: Served) -> None:
    ghosts = [pod(f"ghost-{i}", gpu="1", mem=str(15 * GIB)) for i in range(2)]
    real = pod("real", gpu="1", mem=str(GIB))
    served.pods.apply("ADDED", real)
    for manifest in [*ghosts, real]:
        assert served.filter(manifest, ["n1", "n2"])["NodeNames"]
    assert served.filter(pod("late", gpu="1", mem=str(15 * GIB)), ["n1", "n2"])["NodeNames"] == []
    time.sleep(0.4)
    served.extender.sweep_holds()  # what the timer in main calls
    assert served.ledger.allocation("uid-ghost-0") is None
    assert served.ledger.allocation("uid-ghost-1") is None
    assert served.ledger.allocation("uid-real") is not None  # it exists: kept until the TTL
    assert 'vslice_extender_decisions_total{reason="no_pod",result="expired",verb="hold"} 2.0' in (
        served.metrics()
    )
