"""The DRA mapping: devices a node publishes, claims built from vslice requests, grants read
back from allocations, and the checks of claims users write."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from vslice_core.dra import DRIVER
from vslice_core.dra.allocations import grants, shares
from vslice_core.dra.claims import check, claim_spec, request_name, selectors, unsupported
from vslice_core.dra.devices import SELECTOR, device, resource_slice, same_devices
from vslice_core.errors import InvalidRequest
from vslice_core.model import ContainerRequest, Gpu, GpuGrant, NodeInventory, PodRequest

A100 = Gpu(uuid="GPU-a", model="NVIDIA-A100-SXM4-80GB", memory_mib=81920, slots=8, index=0, numa=1)
T4 = Gpu(uuid="GPU-b", model="Tesla-T4", memory_mib=15360, slots=4, index=1, healthy=False)
NODE = NodeInventory(name="node-a", gpus=[T4, A100])


def test_device_carries_capacities_with_vslice_rules() -> None:
    published = device(A100)
    assert published["name"] == "gpu-0"
    assert published["allowMultipleAllocations"] is True
    memory = published["capacity"]["memory"]
    assert memory["value"] == "81920Mi"
    assert memory["requestPolicy"]["default"] == "81920Mi"  # no memory asked: the whole card
    assert memory["requestPolicy"]["validRange"] == {"min": "1Mi", "max": "81920Mi", "step": "1Mi"}
    cores = published["capacity"]["cores"]
    assert cores["requestPolicy"]["default"] == "0"
    assert cores["requestPolicy"]["validRange"]["max"] == "100"
    assert published["capacity"]["slots"] == {
        "value": "8",
        "requestPolicy": {"default": "1", "validValues": ["1"]},
    }
    assert published["attributes"]["numaNode"] == {"int": 1}
    assert published["attributes"]["uuid"] == {"string": "GPU-a"}


def test_slice_lists_devices_by_index_and_is_owned_by_the_node() -> None:
    body = resource_slice(NODE, generation=3, node_uid="uid-1")
    spec = body["spec"]
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    assert spec["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 1}
    assert spec["nodeName"] == "node-a" and spec["driver"] == DRIVER
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert spec["devices"][1]["attributes"]["healthy"] == {"bool": False}


def test_same_devices_reads_canonical_quantities_and_sees_changes() -> None:
    wanted = resource_slice(NODE, generation=1)
    stored = copy.deepcopy(wanted)
    stored["spec"]["pool"]["generation"] = 7
    memory = stored["spec"]["devices"][0]["capacity"]["memory"]
    memory["value"] = "80Gi"  # what the API server gives back for 81920Mi
    memory["requestPolicy"]["validRange"]["max"] = "80Gi"
    stored["spec"]["devices"][0]["bindsToNode"] = False  # a field the server may default
    assert same_devices(stored, wanted)
    unhealthy = resource_slice(
        NodeInventory(name="node-a", gpus=[A100.model_copy(update={"healthy": False}), T4]), 1
    )
    assert not same_devices(stored, unhealthy)


def test_device_class_selects_healthy_uncordoned_vslice_devices() -> None:
    expression = SELECTOR
    assert f'device.driver == "{DRIVER}"' in expression
    assert expression.endswith('device.attributes["gpu.vslice.io"].allocatable')
    attributes = device(T4)["attributes"]
    assert attributes["allocatable"] == {"bool": False} and attributes["healthy"] == {"bool": False}
    assert device(A100.model_copy(update={"cordoned": True}))["attributes"]["allocatable"] == {
        "bool": False
    }
    assert device(A100)["attributes"]["allocatable"] == {"bool": True}


def pod(*containers: ContainerRequest, **fields: Any) -> PodRequest:
    return PodRequest(name="p", containers=list(containers), **fields)


def test_claim_spec_maps_memory_cores_and_count() -> None:
    spec = claim_spec(
        pod(ContainerRequest(name="Train_1", gpus=2, memory_mib=8192, cores=30), numa_bind=True)
    )
    request = spec["devices"]["requests"][0]
    assert request["name"] == "train-1"
    assert request["exactly"]["count"] == 2
    assert request["exactly"]["capacity"]["requests"] == {"memory": "8192Mi", "cores": "30"}
    assert {"requests": ["train-1"], "distinctAttribute": f"{DRIVER}/uuid"} in spec["devices"][
        "constraints"
    ]
    assert {"requests": ["train-1"], "matchAttribute": f"{DRIVER}/numaNode"} in spec["devices"][
        "constraints"
    ]


def test_whole_card_asks_no_capacity() -> None:
    spec = claim_spec(pod(ContainerRequest(name="c", gpus=1, memory_percent=100, cores=0)))
    assert "capacity" not in spec["devices"]["requests"][0]["exactly"]
    assert "constraints" not in spec["devices"]


def test_a_partial_percentage_is_refused_with_what_works() -> None:
    with pytest.raises(
        InvalidRequest, match=r"gpumem-percentage 50 cannot be asked on the DRA path.*MiB"
    ):
        claim_spec(pod(ContainerRequest(name="c", gpus=1, memory_percent=50, cores=0)))


def test_type_and_uuid_filters_become_cel() -> None:
    found = selectors(
        pod(
            ContainerRequest(name="c", gpus=1, memory_mib=1, cores=0),
            gpu_types=["A100", "h100"],
            gpu_uuids_exclude=['GPU-"x'],
        )
    )
    expressions = [s["cel"]["expression"] for s in found]
    assert expressions[0] == (
        f'device.attributes["{DRIVER}"].model.lowerAscii()'
        '.matches("(^|[^a-z0-9])a100($|[^a-z0-9])") || '
        f'device.attributes["{DRIVER}"].model.lowerAscii()'
        '.matches("(^|[^a-z0-9])h100($|[^a-z0-9])")'
    )
    assert expressions[1] == f'!(device.attributes["{DRIVER}"].uuid in ["GPU-\\"x"])'


def test_request_name_is_a_dns_label() -> None:
    assert request_name("___") == "gpu"
    assert len(request_name("x" * 100)) == 63


def test_unsupported_names_policies() -> None:
    notes = unsupported(
        pod(
            ContainerRequest(name="c", gpus=1, memory_mib=1, cores=0),
            node_policy="spread",
            gpu_policy="topology",
        )
    )
    assert any("spread" in n for n in notes) and any("topology" in n for n in notes)
    assert unsupported(pod(ContainerRequest(name="c", gpus=1, memory_mib=1, cores=0))) == []


def claim(**requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team", "name": "big"},
        "spec": {"devices": {"requests": [{"name": n, "exactly": e} for n, e in requests.items()]}},
    }


def test_check_accepts_what_claim_spec_builds() -> None:
    built = {
        "metadata": {"namespace": "team", "name": "ok"},
        "spec": claim_spec(
            pod(ContainerRequest(name="c", gpus=2, memory_mib=100, cores=5), gpu_types=["a100"])
        ),
    }
    assert check(built) == []


@pytest.mark.parametrize(
    ("exactly", "field", "value"),
    [
        (
            {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": "1.5Mi"}}},
            "spec.devices.requests[g].exactly.capacity.requests.memory",
            "1.5Mi",
        ),
        (
            {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": "100"}}},
            "spec.devices.requests[g].exactly.capacity.requests.memory",
            "100",
        ),
        (
            {"deviceClassName": DRIVER, "capacity": {"requests": {"cores": "150"}}},
            "spec.devices.requests[g].exactly.capacity.requests.cores",
            "150",
        ),
        (
            {"deviceClassName": DRIVER, "capacity": {"requests": {"slots": "2"}}},
            "spec.devices.requests[g].exactly.capacity.requests.slots",
            "2",
        ),
        (
            {"deviceClassName": DRIVER, "capacity": {"requests": {"vram": "1Gi"}}},
            "spec.devices.requests[g].exactly.capacity.requests.vram",
            "1Gi",
        ),
        (
            {"deviceClassName": "big." + DRIVER},
            "spec.devices.requests[g].exactly.deviceClassName",
            "big." + DRIVER,
        ),
        (
            {
                "deviceClassName": DRIVER,
                "selectors": [
                    {"cel": {"expression": f'device.attributes["{DRIVER}"].vendor == "x"'}}
                ],
            },
            "spec.devices.requests[g].exactly.selectors[0].cel.expression",
            "vendor",
        ),
    ],
)
def test_check_names_claim_field_and_value(exactly: dict[str, Any], field: str, value: str) -> None:
    problems = check(claim(g=exactly))
    assert len(problems) == 1
    assert problems[0].field == field and problems[0].value == value
    assert "ResourceClaim team/big" in str(problems[0]) and repr(value) in str(problems[0])


def test_check_leaves_other_drivers_alone() -> None:
    assert (
        check(
            claim(g={"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"vram": "x"}}})
        )
        == []
    )


def allocated(*results: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team", "name": "c1", "uid": "u1"},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def result(device: str = "gpu-0", **extra: Any) -> dict[str, Any]:
    return {"request": "train", "driver": DRIVER, "pool": "node-a", "device": device, **extra}


def test_grants_read_consumed_capacity() -> None:
    got = grants(
        allocated(
            result(consumedCapacity={"memory": "8Gi", "cores": "30", "slots": "1"}, shareID="s1"),
            result("gpu-9", driver="other"),
        ),
        NODE,
    )
    assert got == {"train": [GpuGrant(uuid="GPU-a", index=0, memory_mib=8192, cores=30)]}
    assert shares(allocated(result(shareID="s1")))[0].share_id == "s1"


def test_a_result_without_consumed_capacity_is_the_whole_card() -> None:
    assert grants(allocated(result()), NODE) == {
        "train": [GpuGrant(uuid="GPU-a", index=0, memory_mib=81920, cores=100)]
    }


def test_subrequests_count_for_their_request() -> None:
    assert list(
        grants(allocated(result(request="train/a100", consumedCapacity={"memory": "1Gi"})), NODE)
    ) == ["train"]


def test_unallocated_claim_grants_nothing() -> None:
    assert grants({"metadata": {}, "status": {}}, NODE) == {}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (result("gpu-7"), "status.allocation.devices.results[0].device"),
        (result(pool="node-b"), "status.allocation.devices.results[0].pool"),
        (
            result(consumedCapacity={"memory": "1000"}),
            "status.allocation.devices.results[0].consumedCapacity.memory",
        ),
        (
            result(consumedCapacity={"memory": "100Gi"}),
            "status.allocation.devices.results[0].consumedCapacity.memory",
        ),
        (
            result(consumedCapacity={"cores": "x"}),
            "status.allocation.devices.results[0].consumedCapacity.cores",
        ),
        (result(device=""), "status.allocation.devices.results[0].device"),
        ("junk", "status.allocation.devices.results[0]"),
    ],
)
def test_malformed_allocations_name_the_field(bad: Any, field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        grants(allocated(bad), NODE)
    assert caught.value.field == field
    assert str(caught.value).startswith("ResourceClaim team/c1: " + field)


def test_a_slice_reads_back_as_the_inventory_it_was_made_from() -> None:
    from vslice_core.dra.devices import inventory_from_slice

    stored = resource_slice(NODE, 1)
    stored["spec"]["devices"][0]["capacity"]["memory"]["value"] = "80Gi"  # canonical form
    assert inventory_from_slice(stored) == NodeInventory(name="node-a", gpus=[A100, T4])
    stored["spec"]["devices"][1]["attributes"].pop("uuid")
    with pytest.raises(
        InvalidRequest, match=r"ResourceSlice node-a-gpu.vslice.io: spec.devices\[1\]"
    ):
        inventory_from_slice(stored)


def test_an_allocated_claim_is_an_allocation_of_its_node() -> None:
    from vslice_core.dra.allocations import allocation_of, reserved_for

    claim = allocated(result(consumedCapacity={"memory": "2Gi", "cores": "10"}))
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "trainer", "uid": "p1"}]
    allocation = allocation_of(claim, {"node-a": NODE})
    assert allocation is not None and allocation.node == "node-a"
    assert allocation.containers[0].name == "train"
    assert allocation.containers[0].gpus == [
        GpuGrant(uuid="GPU-a", index=0, memory_mib=2048, cores=10)
    ]
    assert reserved_for(claim) == [("trainer", "p1")]
    assert allocation_of({"metadata": {}}, {"node-a": NODE}) is None
    with pytest.raises(InvalidRequest, match="a node with vslice GPUs"):
        allocation_of(claim, {})


def test_a_claim_reads_back_as_the_request_it_was_built_from() -> None:
    from vslice_core.dra.claims import request_of

    asked = pod(
        ContainerRequest(name="main", gpus=2, memory_mib=8192, cores=30),
        gpu_types=["a100", "h100"],
        gpu_types_exclude=["mig"],
    )
    request, notes = request_of({"spec": claim_spec(asked)}, "team", "p")
    assert notes == []
    assert request.containers == asked.containers
    assert request.gpu_types == ["a100", "h100"] and request.gpu_types_exclude == ["mig"]
    whole, _ = request_of(
        {"spec": claim_spec(pod(ContainerRequest(name="c", gpus=1, memory_percent=100, cores=0)))}
    )
    assert whole.containers[0].memory_percent == 100
    custom = claim(
        g={
            "deviceClassName": DRIVER,
            "selectors": [{"cel": {"expression": 'device.attributes["gpu.vslice.io"].index == 0'}}],
        }
    )
    _, notes = request_of(custom)
    assert notes and "is not judged by the plan" in notes[0]
