"""Slice: what a user may ask for, and the limits and annotations it becomes."""

from __future__ import annotations

import pytest
from vslice import InvalidRequest, Slice
from vslice.manifests import pod_manifest
from vslice_core.requests import pod_request


def test_memory_in_gibibytes_becomes_mib_limits() -> None:
    assert Slice("10Gi", cores=30).limits() == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "10240",
        "nvidia.com/gpucores": "30",
    }


def test_a_plain_number_of_memory_is_mib() -> None:
    assert Slice(2048).memory_mib == 2048


def test_a_percentage_becomes_the_percentage_resource() -> None:
    limits = Slice("30%", gpus=2).limits()
    assert limits == {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "30"}


def test_filters_and_policies_become_annotations() -> None:
    wanted = Slice(
        "4Gi",
        gpu_type="A100, h100",
        exclude_gpu_type=["T4"],
        exclude_gpu_uuid="GPU-9",
        node_policy="Spread",
        gpu_policy="mutex",
        numa_bind=True,
    )
    assert wanted.annotations() == {
        "vslice.io/gpu-type": "A100,h100",
        "vslice.io/gpu-type-exclude": "T4",
        "vslice.io/gpu-uuid-exclude": "GPU-9",
        "vslice.io/node-policy": "spread",
        "vslice.io/gpu-policy": "mutex",
        "vslice.io/numa-bind": "true",
    }


def test_no_memory_and_no_cores_is_an_exclusive_whole_gpu() -> None:
    assert Slice().exclusive
    assert Slice().limits() == {"nvidia.com/gpu": "1"}
    assert not Slice(cores=10).exclusive


def test_the_core_reads_the_slice_back_as_the_same_request() -> None:
    wanted = Slice("10Gi", cores=30, gpus=2, gpu_type="A100", gpu_policy="binpack")
    request = pod_request(pod_manifest("img", "true", slice=wanted))
    (container,) = request.containers
    assert (container.gpus, container.memory_mib, container.cores) == (2, 10240, 30)
    assert request.gpu_types == ["a100"]
    assert request.gpu_policy == "binpack"


@pytest.mark.parametrize(
    ("arguments", "field", "words"),
    [
        ({"memory": "200%"}, "memory", ["200%", "1..100"]),
        ({"memory": "-1Gi"}, "memory", ["-1Gi", "10Gi"]),
        ({"memory": 0}, "memory", ["at least 1 MiB", "0"]),
        ({"memory": "lots"}, "memory", ["'lots'", "10Gi"]),
        ({"cores": 120}, "cores", ["0..100", "120"]),
        ({"cores": -1}, "cores", ["0..100", "-1"]),
        ({"gpus": 0}, "gpus", ["1..64", "0"]),
        ({"gpus": True}, "gpus", ["True"]),
        ({"gpu_policy": "fastest"}, "gpu_policy", ["binpack, mutex, spread, topology", "fastest"]),
        ({"node_policy": "mutex"}, "node_policy", ["binpack, spread", "mutex"]),
        ({"gpu_type": ["A 100"]}, "gpu_type", ["A 100"]),
        ({"colour": "red"}, "colour", ["valid fields", "memory", "cores"]),
        ({"gpus": 2, "gpu_uuid": "GPU-1"}, "gpu_uuid", ["gpus=2", "GPU-1"]),
        ({"gpu_uuid": "GPU-1", "exclude_gpu_uuid": "GPU-1"}, "exclude_gpu_uuid", ["GPU-1"]),
    ],
)
def test_bad_values_name_the_field_the_value_and_the_valid_range(
    arguments: dict[str, object], field: str, words: list[str]
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        Slice(**arguments)  # type: ignore[arg-type]
    assert caught.value.field == field
    for word in words:
        assert word in str(caught.value)


def test_an_invalid_slice_is_also_a_value_error() -> None:
    with pytest.raises(ValueError, match="cores"):
        Slice(cores=101)


def test_a_slice_is_immutable() -> None:
    wanted = Slice("1Gi")
    with pytest.raises(ValueError, match="frozen"):
        wanted.cores = 5  # type: ignore[misc]


def test_describe_reads_like_a_sentence() -> None:
    assert Slice("1536Mi", cores=30).describe() == "1 GPU, 1.5 GiB, 30% cores"
    assert Slice("50%", gpus=2, gpu_type="A100").describe() == "2 GPUs, 50% memory, type A100"


@pytest.mark.parametrize("value", ["10G", "10GB", "512M", "4k"])
def test_decimal_memory_units_are_refused_with_the_binary_spelling_to_use(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        Slice(value)
    assert repr(value) in str(caught.value)
    assert "10Gi" in str(caught.value)
