"""Matching Allocate calls to pods: pure functions (the answer: test_container_handover.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vslice_core import annotations as ann
from vslice_core.errors import DecodeError, InvalidRequest
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant
from vslice_node.deviceplugin.allocator import pod_facts
from vslice_node.deviceplugin.api import podresources_pb2 as pr
from vslice_node.deviceplugin.devices import (
    VirtualDevice,
    gpus_of,
    parse_device_id,
    virtual_devices,
)
from vslice_node.deviceplugin.pending import (
    KubeletView,
    PodFacts,
    choose,
    pending_containers,
)
from vslice_node.deviceplugin.podresources import kubelet_view
from vslice_node.deviceplugin.preferred import preferred_ids

NODE = "n1"
T0, T1 = "2026-01-01T10:00:00Z", "2026-01-01T10:00:01Z"


def grant(uuid: str = "GPU-a", index: int = 0, memory: int = 1024, cores: int = 30) -> GpuGrant:
    return GpuGrant(uuid=uuid, index=index, memory_mib=memory, cores=cores)


def facts(
    name: str,
    since: str,
    containers: dict[str, int],
    *,
    node: str = NODE,
    delivered: frozenset[str] = frozenset(),
    finished: bool = False,
    bound: str | None = None,
) -> PodFacts:
    allocation = Allocation(
        node=node,
        containers=[
            ContainerAllocation(name=c, gpus=[grant(f"GPU-{i}", i) for i in range(n)])
            for c, n in containers.items()
        ],
    )
    bound_at = datetime.fromisoformat(bound) if bound else None
    return PodFacts("ns", name, f"uid-{name}", since, allocation, delivered, finished, bound_at)


# -- pending containers and choosing one ----------------------------------------------------------


def test_pending_containers_are_ordered_oldest_pod_first_then_container_order() -> None:
    pods = [
        facts("b", "2026-01-01T10:00:05Z", {"x": 1}),
        facts("a", "2026-01-01T10:00:01Z", {"second": 1, "first": 1}),
    ]
    order = [(p.pod, p.container) for p in pending_containers(pods, NODE)]
    assert order == [("a", "second"), ("a", "first"), ("b", "x")]


def test_init_containers_are_pending_before_app_containers_of_the_same_pod() -> None:
    allocation = Allocation(
        node=NODE,
        containers=[
            ContainerAllocation(name="app", gpus=[grant()]),
            ContainerAllocation(name="setup", init=True, gpus=[grant()]),
        ],
    )
    pods = [PodFacts("ns", "p", "uid-p", "1", allocation)]
    assert [p.container for p in pending_containers(pods, NODE)] == ["setup", "app"]


def test_delivered_finished_foreign_and_gpu_less_containers_are_not_pending() -> None:
    pods = [
        facts("done", "1", {"main": 1}, delivered=frozenset({"main"})),
        facts("over", "2", {"main": 1}, finished=True),
        facts("elsewhere", "3", {"main": 1}, node="n2"),
        facts("cpu", "4", {"main": 0}),
        PodFacts("ns", "plain", "uid-plain", "5", None),
        facts("half", "6", {"a": 1, "b": 1}, delivered=frozenset({"a"})),
    ]
    assert [(p.pod, p.container) for p in pending_containers(pods, NODE)] == [("half", "b")]


def test_choose_takes_the_oldest_pending_container_of_the_requested_size() -> None:
    pending = pending_containers(
        [
            facts("big", "2026-01-01T09:00:00Z", {"main": 2}),
            facts("old", "2026-01-01T10:00:00Z", {"main": 1}),
            facts("new", "2026-01-01T11:00:00Z", {"main": 1}),
        ],
        NODE,
    )
    chosen = choose(pending, 1, claimed=set())
    assert chosen is not None and chosen.pod == "old"
    chosen = choose(pending, 2, claimed=set())
    assert chosen is not None and chosen.pod == "big"
    assert choose(pending, 3, claimed=set()) is None


def test_choose_skips_claimed_containers_so_concurrent_calls_get_different_pods() -> None:
    pending = pending_containers(
        [facts("old", T0, {"main": 1}), facts("new", T1, {"main": 1})], NODE
    )
    first = choose(pending, 1, claimed=set())
    assert first is not None
    second = choose(pending, 1, claimed={first.key})
    assert second is not None and second.pod == "new"
    assert choose(pending, 1, claimed={first.key, second.key}) is None


@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 3)), min_size=1, max_size=12, unique_by=str
    )
)
def test_repeated_choosing_hands_out_each_pending_container_exactly_once(
    pods: list[tuple[int, int]],
) -> None:
    made = [
        facts(f"p{n}", f"2026-01-01T10:{t:02d}:00Z", {"main": size})
        for n, (t, size) in enumerate(pods)
    ]
    pending = pending_containers(made, NODE)
    claimed: set[tuple[str, str]] = set()
    for size in (1, 2, 3):
        while (item := choose(pending, size, claimed)) is not None:
            assert item.key not in claimed
            assert len(item.grants) == size
            claimed.add(item.key)
    assert claimed == {item.key for item in pending}


# -- decoding pods --------------------------------------------------------------------------------


def pod(annotations: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "creationTimestamp": "2026-01-01T10:00:00Z",
            "annotations": annotations,
            **meta,
        },
        "status": {"phase": "Pending"},
    }


def test_pod_facts_read_the_allocation_and_the_delivered_containers() -> None:
    allocation = Allocation(node=NODE, containers=[ContainerAllocation(name="c", gpus=[grant()])])
    delivered = ann.Delivery(node=NODE, containers=["c"], time="2026-01-01T10:00:01Z")
    found = pod_facts(
        pod(
            {
                ann.ALLOCATION: ann.encode_allocation(allocation),
                ann.DELIVERED: ann.encode_delivered(delivered),
            }
        )
    )
    assert found.allocation == allocation
    assert found.delivered == {"c"}
    assert found.since == "2026-01-01T10:00:00Z"
    assert not found.finished


def test_pods_created_in_the_same_second_are_matched_in_binding_order() -> None:
    # Same second, same GPU count: names say "a" first, but "b" was bound (and so reached the
    # kubelet) first. Matching by name would swap the two pods' slices.
    same = "2026-01-01T10:00:00Z"
    pods = [
        facts("a", same, {"main": 1}, bound="2026-01-01T10:00:00.730000Z"),
        facts("b", same, {"main": 1}, bound="2026-01-01T10:00:00.120000Z"),
    ]
    first = choose(pending_containers(pods, NODE), 1, ())
    assert first is not None and first.pod == "b"


def test_binding_order_wins_over_creation_order() -> None:
    # "old" was created first but waited for room; "new" was bound and reached the kubelet first.
    pods = [
        facts("old", "2026-01-01T10:00:00Z", {"main": 1}, bound="2026-01-01T10:05:00.5Z"),
        facts("new", "2026-01-01T10:03:00Z", {"main": 1}, bound="2026-01-01T10:03:00.2Z"),
    ]
    assert [p.pod for p in pending_containers(pods, NODE)] == ["new", "old"]


def test_pods_without_a_bind_time_fall_back_to_their_creation_time() -> None:
    pods = [
        facts("late", "2026-01-01T10:00:02Z", {"main": 1}),
        facts("bound", "2026-01-01T10:00:00Z", {"main": 1}, bound="2026-01-01T10:00:01.5Z"),
        facts("early", "2026-01-01T10:00:01Z", {"main": 1}),
    ]
    assert [p.pod for p in pending_containers(pods, NODE)] == ["early", "bound", "late"]


def test_the_kubelets_record_removes_served_containers_and_picks_the_admitted_pod() -> None:
    pods = [
        facts("served", T0, {"main": 1}),  # got devices; its delivered record was lost
        facts("queued", T0, {"main": 1}, bound="2026-01-01T10:00:00.1Z"),
        facts("admitting", T1, {"main": 1}, bound="2026-01-01T10:00:01.9Z"),
    ]
    kubelet = KubeletView({("ns", "served"): frozenset({"main"}), ("ns", "admitting"): frozenset()})
    pending = pending_containers(pods, NODE, kubelet)
    assert [p.pod for p in pending] == ["queued", "admitting"]
    chosen = choose(pending, 1, (), kubelet)
    assert chosen is not None and chosen.pod == "admitting"
    # a kubelet whose list lags (no candidate listed yet): the order decides
    assert choose(pending, 1, (), KubeletView()) == choose(pending, 1, ())


def test_the_kubelet_view_counts_only_containers_holding_devices_of_our_resource() -> None:
    def devices(resource: str, *ids: str) -> pr.ContainerDevices:
        return pr.ContainerDevices(resource_name=resource, device_ids=list(ids))

    response = pr.ListPodResourcesResponse(
        pod_resources=[
            pr.PodResources(
                name="p",
                namespace="ns",
                containers=[
                    pr.ContainerResources(name="gpu", devices=[devices("nvidia.com/gpu", "a")]),
                    pr.ContainerResources(name="nic", devices=[devices("example.com/nic", "n")]),
                    pr.ContainerResources(name="empty", devices=[devices("nvidia.com/gpu")]),
                ],
            ),
            pr.PodResources(name="cpu-only", namespace="ns"),
        ]
    )
    view = kubelet_view(response, "nvidia.com/gpu")
    assert view.pods == {("ns", "p"): frozenset({"gpu"}), ("ns", "cpu-only"): frozenset()}
    assert view.knows("ns", "cpu-only") and not view.knows("other", "p")


def test_pod_facts_read_the_bind_time_and_ignore_a_malformed_one() -> None:
    moment = datetime(2026, 1, 1, 10, 0, 0, 250000, tzinfo=UTC)
    assert pod_facts(pod({ann.BIND_TIME: ann.encode_bind_time(moment)})).bound == moment
    # Someone else's bad value is only a lost hint: the pod itself still counts.
    found = pod_facts(pod({ann.BIND_TIME: "yesterday"}))
    assert found.bound is None and found.arrival == datetime(2026, 1, 1, 10, tzinfo=UTC)


def test_a_pod_being_deleted_counts_as_finished() -> None:
    assert pod_facts(pod({}, deletionTimestamp="2026-01-01T10:00:09Z")).finished


@pytest.mark.parametrize("key", [ann.ALLOCATION, ann.DELIVERED])
def test_malformed_vslice_annotations_raise_decode_error_naming_the_key(key: str) -> None:
    with pytest.raises(DecodeError, match=key):
        pod_facts(pod({key: "{not json"}))


# -- device IDs -----------------------------------------------------------------------------------


class _Gpu:
    def __init__(self, uuid: str, index: int, slots: int, healthy: bool = True) -> None:
        self.uuid, self.index, self.slots, self.healthy, self.numa = (
            uuid,
            index,
            slots,
            healthy,
            index,
        )


def test_each_gpu_becomes_slots_devices_in_index_order() -> None:
    devices = virtual_devices([_Gpu("GPU-b", 1, 2, healthy=False), _Gpu("GPU-a", 0, 1)])
    assert [(d.id, d.health, d.numa) for d in devices] == [
        ("GPU-a::0", "Healthy", 0),
        ("GPU-b::0", "Unhealthy", 1),
        ("GPU-b::1", "Unhealthy", 1),
    ]


def test_device_ids_round_trip_even_when_the_uuid_contains_colons() -> None:
    device = VirtualDevice("MIG-GPU-a:1:0", 7)
    assert parse_device_id(device.id) == ("MIG-GPU-a:1:0", 7)


@pytest.mark.parametrize("bad", ["nvidia0", "GPU-a::", "::3", "GPU-a::x"])
def test_foreign_device_ids_are_rejected_naming_the_id(bad: str) -> None:
    with pytest.raises(InvalidRequest, match=repr(bad)):
        parse_device_id(bad)


def test_device_ids_of_unknown_gpus_are_rejected_listing_the_known_ones() -> None:
    assert gpus_of(["GPU-a::1", "GPU-a::0", "GPU-b::0"], ["GPU-a", "GPU-b"]) == ["GPU-a", "GPU-b"]
    with pytest.raises(InvalidRequest, match="known GPUs: GPU-a"):
        gpus_of(["GPU-z::0"], ["GPU-a"])


# -- preferred allocation -----------------------------------------------------------------

AVAILABLE = ["GPU-a::0", "GPU-a::1", "GPU-b::0", "GPU-b::1", "GPU-c::0"]


def test_preferred_ids_take_one_slot_on_each_target_gpu() -> None:
    assert preferred_ids(AVAILABLE, [], 2, ["GPU-c", "GPU-b"]) == ["GPU-c::0", "GPU-b::0"]


def test_preferred_ids_keep_must_include_and_spread_the_rest_over_distinct_gpus() -> None:
    assert preferred_ids(AVAILABLE, ["GPU-a::1"], 3) == ["GPU-a::1", "GPU-b::0", "GPU-c::0"]


def test_preferred_ids_fall_back_when_the_target_gpu_has_no_free_slot() -> None:
    assert preferred_ids(["GPU-a::0", "GPU-a::1"], [], 1, ["GPU-b"]) == ["GPU-a::0"]


@given(
    st.lists(st.sampled_from(AVAILABLE), unique=True, min_size=1),
    st.integers(1, 5),
    st.lists(st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]), unique=True),
)
def test_preferred_ids_are_always_distinct_available_and_never_too_many(
    available: list[str], size: int, targets: list[str]
) -> None:
    chosen = preferred_ids(available, [], size, targets)
    assert len(chosen) == min(size, len(available))
    assert len(set(chosen)) == len(chosen)
    assert set(chosen) <= set(available)
