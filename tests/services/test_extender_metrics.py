"""The extender's /metrics as Prometheus scrapes it: names, labels and base units.

The server is the real one (the extender's routes on ``HttpService``); nodes, pods and
ResourceQuotas reach the ledger through the same watch handlers as in production. Every
assertion reads the scraped text through ``prometheus_client``'s own parser, so a value in
the wrong unit or a label out of place fails here as it would on a dashboard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from served import call
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.main import routes
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.verbs import Extender
from vslice_control.quota.limits import QuotaBook
from vslice_core.annotations import ALLOCATION, NODE_GPUS, encode_allocation, encode_node_gpus
from vslice_core.ledger import Ledger
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    Gpu,
    GpuGrant,
    NamespaceQuota,
    NodeInventory,
    QuotaLimits,
    QuotaUsage,
)
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_serving.httpserve import HttpService
from vslice_serving.settings import SchedulerSettings

NAMES = DEFAULT_RESOURCE_NAMES
MIB = 1024 * 1024
GIB_MIB = 1024  # one GiB in MiB, the ledger's unit
Labels = dict[str, str]


def node(name: str, *memories_mib: int, model: str = "NVIDIA-A100-SXM4-80GB") -> dict[str, Any]:
    gpus = [
        Gpu(uuid=f"GPU-{name}-{i}", model=model, memory_mib=mib, slots=4, index=i)
        for i, mib in enumerate(memories_mib)
    ]
    value = encode_node_gpus(NodeInventory(name=name, gpus=gpus))
    return {"metadata": {"name": name, "annotations": {NODE_GPUS: value}}}


def grant(node_name: str, index: int, memory_mib: int, cores: int) -> GpuGrant:
    return GpuGrant(
        uuid=f"GPU-{node_name}-{index}", index=index, memory_mib=memory_mib, cores=cores
    )


def bound(
    name: str,
    node_name: str,
    *containers: list[GpuGrant],
    namespace: str = "team-a",
    uid: str = "",
) -> dict[str, Any]:
    """A bound, running pod whose allocation annotation gives each container these grants."""
    allocation = Allocation(
        node=node_name,
        containers=[
            ContainerAllocation(name=f"c{i}", gpus=grants) for i, grants in enumerate(containers)
        ],
    )
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "annotations": {ALLOCATION: encode_allocation(allocation)},
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "c0"}]},
        "status": {"phase": "Running"},
    }


def pending(name: str, namespace: str = "team-a", **limits: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }


def resource_quota(name: str, namespace: str, **hard: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": hard}}


@dataclass
class Scrape:
    """One scrape, parsed: ``value(name, labels)`` of one series, ``series(name)`` of all."""

    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, text: str) -> Scrape:
        scrape = cls()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                scrape.samples.setdefault(sample.name, []).append((sample.labels, sample.value))
        return scrape

    def series(self, name: str) -> list[tuple[Labels, float]]:
        return self.samples.get(name, [])

    def value(self, name: str, **labels: str) -> float:
        found = [v for got, v in self.series(name) if labels.items() <= got.items()]
        assert len(found) == 1, f"{name}{labels}: {len(found)} series in {self.series(name)}"
        return found[0]


@dataclass
class Served:
    port: int
    ledger: Ledger
    nodes: NodeFeed
    pods: PodFeed
    quotas: QuotaBook
    verbs: Extender
    state: dict[str, bool]

    def scrape(self) -> Scrape:
        reply = call(self.port, "GET", "/metrics")
        assert reply.status == 200
        return Scrape.of(reply.body.decode())

    def filter(self, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
        reply = call(self.port, "POST", "/filter", {"Pod": pod, "NodeNames": names})
        assert reply.status == 200, reply.body
        result: dict[str, Any] = reply.json()
        return result


Start = Callable[..., Served]


@pytest.fixture
def start() -> Iterator[Start]:
    services: list[HttpService] = []

    def started(*, hami: bool = False, leader_election: bool = False) -> Served:
        ledger, holds = Ledger(), Holds(ttl_seconds=60)
        metrics = ExtenderMetrics(ledger, hami=hami)
        state = {"synced": True, "leader": True}
        verbs = Extender(ledger, holds, None, metrics, names=NAMES, synced=lambda: state["synced"])
        nodes, pods = NodeFeed(ledger), PodFeed(ledger, holds)
        metrics.count_refused(nodes.refused)
        metrics.name_pods(pods.names)
        quotas = QuotaBook(NAMES, ledger.set_quota)
        nodes.replace([node("n1", 80 * GIB_MIB, 80 * GIB_MIB)])
        pods.replace([])
        quotas.replace([])
        standby = (lambda: not state["leader"]) if leader_election else None
        service = HttpService(
            ("127.0.0.1", 0),
            routes(verbs, metrics, lambda: state["synced"], nodes, standby),
        )
        service.start()
        services.append(service)
        return Served(service.port, ledger, nodes, pods, quotas, verbs, state)

    yield started
    for service in services:
        service.stop()


@pytest.fixture
def served(start: Start) -> Served:
    return start()


GPU0 = {"node": "n1", "gpu": "GPU-n1-0", "index": "0"}
GPU1 = {"node": "n1", "gpu": "GPU-n1-1", "index": "1"}


# ----- per GPU ---------------------------------------------------------------------------


def test_a_gpu_shows_its_capacity_and_what_slices_take_in_base_units(served: Served) -> None:
    served.pods.apply("ADDED", bound("a", "n1", [grant("n1", 0, 1024, 25)]))
    scrape = served.scrape()
    labels = {**GPU0, "model": "NVIDIA-A100-SXM4-80GB", "path": "extender"}
    series = scrape.series("vslice_gpu_allocated_memory_bytes")
    (got, value) = next((got, v) for got, v in series if got["index"] == "0")
    assert got == labels  # exactly these labels: the model as the node writes it, not lowered
    assert value == 1073741824  # 1024 MiB
    assert scrape.value("vslice_gpu_allocated_cores_ratio", **GPU0) == 0.25
    assert scrape.value("vslice_gpu_allocated_slots", **GPU0) == 1
    assert scrape.value("vslice_gpu_memory_capacity_bytes", **GPU0) == 80 * 1024 * MIB
    assert scrape.value("vslice_gpu_slots_capacity", **GPU0) == 4
    # The other GPU is there, with nothing taken.
    assert scrape.value("vslice_gpu_allocated_memory_bytes", **GPU1) == 0
    assert scrape.value("vslice_gpu_allocated_cores_ratio", **GPU1) == 0


def test_cores_summed_on_one_gpu_and_the_old_names_are_gone(served: Served) -> None:
    served.pods.apply("ADDED", bound("a", "n1", [grant("n1", 0, 1024, 30)]))
    served.pods.apply("ADDED", bound("b", "n1", [grant("n1", 0, 2048, 70)]))
    scrape = served.scrape()
    assert scrape.value("vslice_gpu_allocated_cores_ratio", **GPU0) == 1.0
    assert scrape.value("vslice_gpu_allocated_memory_bytes", **GPU0) == 3072 * MIB
    assert scrape.value("vslice_gpu_allocated_slots", **GPU0) == 2
    assert not scrape.series("vslice_gpu_allocated_memory_mib")
    assert not scrape.series("vslice_gpu_allocated_cores")
    assert not [name for name in scrape.samples if name.endswith("_created")]


def test_a_deleted_pod_frees_the_gpu_and_a_removed_node_takes_its_series_along(
    served: Served,
) -> None:
    pod = bound("a", "n1", [grant("n1", 0, 1024, 25)])
    served.pods.apply("ADDED", pod)
    served.pods.apply("DELETED", pod)
    assert served.scrape().value("vslice_gpu_allocated_memory_bytes", **GPU0) == 0
    served.nodes.apply("DELETED", node("n1"))
    scrape = served.scrape()
    for name in ("vslice_gpu_memory_capacity_bytes", "vslice_gpu_allocated_memory_bytes"):
        assert scrape.series(name) == []


# ----- per namespace with a quota --------------------------------------------------------


def test_a_namespace_quota_shows_its_limits_and_what_counts_against_it(served: Served) -> None:
    hard = {f"requests.{NAMES.memory}": "4096", f"requests.{NAMES.cores}": "150"}
    served.quotas.apply("ADDED", resource_quota("gpu", "team-a", **hard))
    served.pods.apply(
        "ADDED", bound("a", "n1", [grant("n1", 0, 1024, 25)], [grant("n1", 1, 512, 10)])
    )
    served.pods.apply("ADDED", bound("other", "n1", [grant("n1", 1, 4096, 50)], namespace="b"))
    scrape = served.scrape()
    assert scrape.value("vslice_quota_memory_limit_bytes", namespace="team-a") == 4096 * MIB
    assert scrape.value("vslice_quota_cores_limit_ratio", namespace="team-a") == 1.5
    assert scrape.value("vslice_quota_memory_used_bytes", namespace="team-a") == 1536 * MIB
    assert scrape.value("vslice_quota_cores_used_ratio", namespace="team-a") == 0.35
    assert scrape.value("vslice_quota_slices_used", namespace="team-a") == 2
    # The quota sets no slice limit: no limit series for it (not 0, not +Inf).
    assert scrape.series("vslice_quota_slices_limit") == []
    # Namespace b has no quota: no quota series at all, though its pod counts on the GPU.
    for name in scrape.samples:
        if name.startswith("vslice_quota_"):
            assert {labels["namespace"] for labels, _ in scrape.series(name)} == {"team-a"}


def test_quota_usage_counts_filter_holds_as_the_bind_does(served: Served) -> None:
    hard = {f"requests.{NAMES.gpu}": "3"}
    served.quotas.apply("ADDED", resource_quota("gpu", "team-a", **hard))
    chosen = served.filter(pending("p", **{NAMES.gpu: "1", NAMES.memory: "2048"}), ["n1"])
    assert chosen["NodeNames"] == ["n1"]
    scrape = served.scrape()
    assert scrape.value("vslice_quota_slices_limit", namespace="team-a") == 3
    assert scrape.value("vslice_quota_slices_used", namespace="team-a") == 1
    assert scrape.value("vslice_quota_memory_used_bytes", namespace="team-a") == 2048 * MIB


def test_quota_series_go_when_the_quota_goes(served: Served) -> None:
    quota = resource_quota("gpu", "team-a", **{f"requests.{NAMES.memory}": "4Gi"})
    served.quotas.apply("ADDED", quota)
    assert served.scrape().value("vslice_quota_memory_limit_bytes", namespace="team-a") == (
        4096 * MIB
    )
    served.quotas.apply("DELETED", quota)
    scrape = served.scrape()
    assert scrape.series("vslice_quota_memory_limit_bytes") == []
    assert scrape.series("vslice_quota_memory_used_bytes") == []


def test_quota_usage_includes_what_the_quota_itself_counts_as_used() -> None:
    ledger = Ledger()
    ledger.set_quota(
        "ns",
        NamespaceQuota(limits=QuotaLimits(gpus=8), used=QuotaUsage(memory_mib=100, gpus=2)),
    )
    scrape = Scrape.of(ExtenderMetrics(ledger).exposition().decode())
    assert scrape.value("vslice_quota_memory_used_bytes", namespace="ns") == 100 * MIB
    assert scrape.value("vslice_quota_slices_used", namespace="ns") == 2
    assert scrape.value("vslice_quota_slices_limit", namespace="ns") == 8


# ----- the process -----------------------------------------------------------------------


def test_synced_is_0_until_the_lists_are_loaded(served: Served) -> None:
    served.state["synced"] = False
    assert served.scrape().value("vslice_extender_synced") == 0
    served.state["synced"] = True
    assert served.scrape().value("vslice_extender_synced") == 1


def test_without_leader_election_every_replica_is_leader(served: Served) -> None:
    assert served.scrape().value("vslice_extender_leader") == 1


def test_with_leader_election_leader_follows_the_lease(start: Start) -> None:
    served = start(leader_election=True)
    served.state["leader"] = False
    assert served.scrape().value("vslice_extender_leader") == 0
    served.state["leader"] = True
    assert served.scrape().value("vslice_extender_leader") == 1


def test_decisions_and_latency_keep_their_names(served: Served) -> None:
    served.filter(pending("p", **{NAMES.gpu: "1", NAMES.memory: "1024"}), ["n1"])
    scrape = served.scrape()
    decided = scrape.value(
        "vslice_extender_decisions_total", verb="filter", result="fit", reason="none"
    )
    assert decided == 1
    assert scrape.value("vslice_extender_filter_seconds_count") == 1
    assert scrape.value("vslice_extender_bind_seconds_count") == 0


# ----- HAMi's names (hami_metrics) -------------------------------------------------------


def test_hami_series_are_off_by_default(served: Served) -> None:
    served.pods.apply("ADDED", bound("a", "n1", [grant("n1", 0, 1024, 25)]))
    scrape = served.scrape()
    assert not [n for n in scrape.samples if n.startswith(("GPUDevice", "vGPU"))]
    assert SchedulerSettings().hami_metrics is False


def test_hami_series_carry_hamis_names_labels_and_units(start: Start) -> None:
    served = start(hami=True)
    served.pods.apply(
        "ADDED", bound("train", "n1", [grant("n1", 0, 1024, 25)], [grant("n1", 0, 2048, 10)])
    )
    scrape = served.scrape()
    gpu = {
        "nodeid": "n1",
        "deviceuuid": "GPU-n1-0",
        "deviceidx": "0",
        "devicetype": "NVIDIA-A100-SXM4-80GB",
        "zone": "vGPU",
    }
    assert scrape.value("GPUDeviceMemoryLimit", **gpu) == 80 * 1024 * MIB  # bytes
    assert scrape.value("GPUDeviceCoreLimit", **gpu) == 100  # percent
    assert scrape.value("GPUDeviceMemoryAllocated", **gpu, devicecores="100") == 3072 * MIB
    assert scrape.value("GPUDeviceCoreAllocated", **gpu) == 35  # percent, summed
    assert scrape.value("GPUDeviceSharedNum", **gpu) == 2
    pods = scrape.series("vGPUPodsDeviceAllocated")
    assert sorted(pods, key=lambda s: s[0]["containeridx"]) == [
        (
            {
                "podnamespace": "team-a",
                "nodename": "n1",
                "podname": "train",
                "containeridx": "0",
                "deviceuuid": "GPU-n1-0",
                "deviceusedcore": "25",
                "zone": "vGPU",
            },
            1024 * MIB,
        ),
        (
            {
                "podnamespace": "team-a",
                "nodename": "n1",
                "podname": "train",
                "containeridx": "1",
                "deviceuuid": "GPU-n1-0",
                "deviceusedcore": "10",
                "zone": "vGPU",
            },
            2048 * MIB,
        ),
    ]
    # vslice's own series stay beside them.
    assert scrape.value("vslice_gpu_allocated_memory_bytes", **GPU0) == 3072 * MIB


def test_hami_pod_series_disappear_with_the_pod(start: Start) -> None:
    served = start(hami=True)
    pod = bound("train", "n1", [grant("n1", 0, 1024, 25)])
    served.pods.apply("ADDED", pod)
    assert len(served.scrape().series("vGPUPodsDeviceAllocated")) == 1
    served.pods.apply("MODIFIED", {**pod, "status": {"phase": "Succeeded"}})
    assert served.scrape().series("vGPUPodsDeviceAllocated") == []


def test_two_pods_of_one_name_make_one_hami_series_not_a_duplicate(start: Start) -> None:
    served = start(hami=True)
    # A StatefulSet pod replaced while the old one still holds its slice: same name, two uids.
    served.pods.apply("ADDED", bound("db-0", "n1", [grant("n1", 0, 1024, 10)], uid="old"))
    served.pods.apply("ADDED", bound("db-0", "n1", [grant("n1", 0, 1024, 10)], uid="new"))
    (only,) = served.scrape().series("vGPUPodsDeviceAllocated")
    assert only[1] == 2048 * MIB


def test_the_hami_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSLICE_HAMI_METRICS", "true")
    assert SchedulerSettings().hami_metrics is True
