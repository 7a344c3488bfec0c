"""Device taints on the DRA path: a failed GPU's device is tainted NoExecute, a cordoned one
NoSchedule; rewrites keep a taint's timeAdded; an API server that drops taints (the feature
gate off) is noticed at once and not rewritten every resync; a taint removed by hand is
written again. The lab test tests/e2e/test_dra_realnode_taints.py shows kube-scheduler and
kube-controller-manager acting on them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dra_fakes import NODE, Slices
from vslice_core.dra import taints
from vslice_core.dra.devices import resource_slice, same_devices
from vslice_core.model import Gpu, NodeInventory
from vslice_node.dra.publisher import SlicePublisher

GPUS = [
    Gpu(uuid=f"GPU-22222222-0000-4000-8000-00000000000{i}", model="L4", memory_mib=23034,
        slots=4, index=i)
    for i in range(3)
]  # fmt: skip


def _inventory(*, sick: int | None = None, cordoned: int | None = None) -> NodeInventory:
    gpus = [
        gpu.model_copy(update={"healthy": gpu.index != sick, "cordoned": gpu.index == cordoned})
        for gpu in GPUS
    ]
    return NodeInventory(name=NODE, gpus=gpus)


def _taints(stored: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {d["name"]: d.get("taints", []) for d in stored["spec"]["devices"]}


def test_a_failed_gpu_is_tainted_no_execute_and_a_cordoned_one_no_schedule() -> None:
    published = resource_slice(_inventory(sick=0, cordoned=1), generation=1)
    assert _taints(published) == {
        "gpu-0": [{"key": "gpu.vslice.io/unhealthy", "effect": "NoExecute"}],
        "gpu-1": [{"key": "gpu.vslice.io/cordoned", "effect": "NoSchedule"}],
        "gpu-2": [],
    }
    # The attribute the DeviceClass selects on says the same, for clusters without taints.
    allocatable = {
        d["name"]: d["attributes"]["allocatable"]["bool"] for d in published["spec"]["devices"]
    }
    assert allocatable == {"gpu-0": False, "gpu-1": False, "gpu-2": True}


def test_the_time_the_server_stamps_is_not_a_difference_but_a_taint_is() -> None:
    wanted = resource_slice(_inventory(sick=0), generation=1)
    stored = copy.deepcopy(wanted)
    stored["spec"]["devices"][0]["taints"][0]["timeAdded"] = "2026-12-05T00:00:00Z"
    assert same_devices(stored, wanted)
    healthy = resource_slice(_inventory(), generation=2)
    assert not same_devices(stored, healthy)
    assert same_devices(stored, healthy, with_taints=False) is False  # the attribute differs too


class StampingSlices(Slices):
    """An API server with device taints on: it stamps timeAdded on taints that lack it."""

    def put_resource_slice(self, body: Mapping[str, Any], resource_version: str | None) -> None:
        body = copy.deepcopy(dict(body))
        for device in body["spec"]["devices"]:
            for taint in device.get("taints", []):
                taint.setdefault("timeAdded", f"2026-12-05T00:00:0{self.writes}Z")
        super().put_resource_slice(body, resource_version)


class DroppingSlices(Slices):
    """An API server with the DRADeviceTaints gate off: it stores no taints."""

    def put_resource_slice(self, body: Mapping[str, Any], resource_version: str | None) -> None:
        body = copy.deepcopy(dict(body))
        for device in body["spec"]["devices"]:
            device.pop("taints", None)
        super().put_resource_slice(body, resource_version)


def test_a_rewrite_for_another_gpu_keeps_the_first_taints_time() -> None:
    api = StampingSlices()
    publisher = SlicePublisher(api, NODE)
    publisher.maybe_publish(_inventory(sick=0), now=0)
    (stored,) = api.stored.values()
    first = _taints(stored)["gpu-0"][0]["timeAdded"]
    publisher.maybe_publish(_inventory(sick=0, cordoned=2), now=1)
    (stored,) = api.stored.values()
    assert api.writes == 2
    assert _taints(stored)["gpu-0"][0]["timeAdded"] == first  # the eviction clock runs on
    assert _taints(stored)["gpu-2"][0]["timeAdded"] != first  # a new taint, a new time
    publisher.maybe_publish(_inventory(sick=0, cordoned=2), now=60)  # resync: equal
    assert api.writes == 2


def test_an_api_server_without_taints_is_noticed_once_and_not_rewritten() -> None:
    api = DroppingSlices()
    publisher = SlicePublisher(api, NODE, every_s=30)
    publisher.maybe_publish(_inventory(sick=0), now=0)
    assert api.writes == 1 and publisher.taints_dropped  # read back once, without its taint
    assert "drops device taints" in publisher.state
    for now in (40, 80, 120):  # resyncs: equal but for the taints, nothing written
        publisher.maybe_publish(_inventory(sick=0), now=now)
    assert api.writes == 1
    # A real change is still written (the attribute keeps the GPU out of new claims).
    publisher.maybe_publish(_inventory(), now=121)
    (stored,) = api.stored.values()
    assert api.writes == 2
    assert stored["spec"]["devices"][0]["attributes"]["allocatable"] == {"bool": True}


def test_a_taint_someone_removes_is_written_again() -> None:
    api = StampingSlices()
    publisher = SlicePublisher(api, NODE, every_s=30)
    publisher.maybe_publish(_inventory(sick=0), now=0)
    (stored,) = api.stored.values()
    del stored["spec"]["devices"][0]["taints"]  # an edit by hand, with taints supported
    publisher.maybe_publish(_inventory(sick=0), now=40)
    (stored,) = api.stored.values()
    assert api.writes == 2 and not publisher.taints_dropped
    assert _taints(stored)["gpu-0"][0]["effect"] == "NoExecute"


def test_normal_taints_read_what_someone_else_wrote_without_failing() -> None:
    device = {"taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "t"}, "junk"]}
    assert taints.normal(device) == [("k", "", "NoSchedule")]
    assert taints.normal({"taints": "not a list"}) == []
