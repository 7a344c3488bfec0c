import re
from typing import Any

import pytest
from core_builders import container, pod, request
from hypothesis import given
from hypothesis import strategies as st
from vslice_core import quantities
from vslice_core.annotations import HAMI_ALIASES
from vslice_core.errors import InvalidRequest
from vslice_core.model import ContainerRequest
from vslice_core.requests import (
    MAX_GPUS,
    MAX_MEMORY_MIB,
    limit_patch,
    normalize_gpu_pod,
    normalize_pod,
    pod_request,
    uses_gpus,
)
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames


def only(manifest: dict[str, Any]) -> ContainerRequest:
    (single,) = pod_request(manifest).containers
    return single


def test_memory_alone_means_one_gpu_and_no_reserved_cores() -> None:
    normalized = normalize_pod(pod(container(mem="4Gi")))
    (single,) = normalized.request.containers
    assert (single.gpus, single.memory_mib, single.memory_percent, single.cores) == (
        1,
        4096,
        None,
        0,
    )
    assert [(c.resource, c.value) for c in normalized.changes] == [("nvidia.com/gpu", "1")]


def test_cores_alone_means_one_whole_gpu_with_those_cores() -> None:
    normalized = normalize_pod(pod(container(cores=30)))
    (single,) = normalized.request.containers
    assert (single.gpus, single.memory_percent, single.cores, single.exclusive) == (
        1,
        100,
        30,
        False,
    )
    assert [(c.resource, c.value) for c in normalized.changes] == [("nvidia.com/gpu", "1")]


def test_a_whole_card_request_without_cores_becomes_exclusive() -> None:
    normalized = normalize_pod(pod(container(gpu=2)))
    (single,) = normalized.request.containers
    assert (single.gpus, single.memory_percent, single.cores, single.exclusive) == (
        2,
        100,
        100,
        True,
    )
    assert [(c.resource, c.value) for c in normalized.changes] == [("nvidia.com/gpucores", "100")]


def test_a_percentage_request_keeps_its_percentage() -> None:
    single = only(pod(container(gpu=1, pct=25, cores=10)))
    assert (single.memory_mib, single.memory_percent, single.cores) == (None, 25, 10)


def test_values_given_only_as_requests_are_read_and_copied_to_limits() -> None:
    manifest = pod({"name": "main", "resources": {"requests": {"nvidia.com/gpumem": "2Gi"}}})
    normalized = normalize_pod(manifest)
    assert normalized.request.containers[0].memory_mib == 2048
    assert {(c.resource, c.value) for c in normalized.changes} == {
        ("nvidia.com/gpumem", "2Gi"),
        ("nvidia.com/gpu", "1"),
    }


def test_requests_equal_to_limits_in_another_spelling_are_read_from_limits() -> None:
    manifest = pod(
        {
            "name": "main",
            "resources": {
                "limits": {"nvidia.com/gpumem": "3000"},
                "requests": {"nvidia.com/gpumem": "3k"},
            },
        }
    )
    normalized = normalize_pod(manifest)
    assert normalized.request.containers[0].memory_mib == 3000
    assert [(c.resource, c.value) for c in normalized.changes] == [("nvidia.com/gpu", "1")]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"cores": 120}, "nvidia.com/gpucores must be 0..100, got 120"),
        ({"cores": -1}, "nvidia.com/gpucores must be >= 0, got -1"),
        ({"mem": 0}, "nvidia.com/gpumem must be at least 1 MiB, got 0"),
        (
            {"mem": "lots"},
            "spec.containers[0].resources.limits['nvidia.com/gpumem'] must be a Kubernetes "
            "quantity written with ASCII digits and no blanks (e.g. '30720' or '4Gi'), got 'lots'",
        ),
        ({"pct": 0}, "nvidia.com/gpumem-percentage must be 1..100, got 0"),
        ({"pct": 101}, "nvidia.com/gpumem-percentage must be 1..100, got 101"),
        (
            {"gpu": 0, "mem": 10},
            "nvidia.com/gpu must be at least 1 when nvidia.com/gpumem is set, got 0",
        ),
        (
            {"gpu": "two"},
            "spec.containers[0].resources.limits['nvidia.com/gpu'] must be a Kubernetes "
            "quantity written with ASCII digits and no blanks (e.g. '30720' or '4Gi'), got 'two'",
        ),
        (
            {"gpu": None},
            "spec.containers[0].resources.limits['nvidia.com/gpu'] must be a quantity string "
            "such as '3000', got None",
        ),
        ({"gpu": 1.5}, "nvidia.com/gpu must be a whole number, got 1.5"),
        (
            {"mem": 10, "pct": 50},
            "nvidia.com/gpumem-percentage must be unset when nvidia.com/gpumem is set, got 50",
        ),
    ],
)
def test_invalid_values_name_the_field_and_the_value(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        pod_request(pod(container(**limits)))
    assert str(caught.value) == message
    assert caught.value.field is not None and str(caught.value).startswith(caught.value.field)


MEM_LIMIT = "spec.containers[0].resources.limits['nvidia.com/gpumem']"
GRAMMAR = (
    "must be a Kubernetes quantity written with ASCII digits and no blanks (e.g. '30720' or '4Gi')"
)


@pytest.mark.parametrize(
    "value",
    [
        "3000 ",
        " 3000",
        "3000\n",
        "\u0663\u0660\u0660\u0660",  # Arabic-Indic digits: Python's \d matches them
        "\uff13\uff10\uff10\uff10",  # full-width digits
        "3\u0660\u0660\u0660",  # one foreign digit among ASCII ones
    ],
)
def test_a_value_the_api_server_would_not_accept_is_refused_naming_its_path(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        pod_request(pod(container(gpu="1", mem=value)))
    assert str(caught.value) == f"{MEM_LIMIT} {GRAMMAR}, got {value!r}"
    assert (caught.value.field, caught.value.value) == (MEM_LIMIT, value)


def test_requests_and_init_containers_are_read_with_the_same_grammar() -> None:
    setup = {"name": "setup", "resources": {"requests": {"nvidia.com/gpucores": "5 "}}}
    with pytest.raises(InvalidRequest) as caught:
        pod_request(pod(container(mem=100), init=(setup,)))
    where = "spec.initContainers[0].resources.requests['nvidia.com/gpucores']"
    assert str(caught.value) == f"{where} {GRAMMAR}, got '5 '"


def test_requests_unlike_limits_are_refused_naming_both() -> None:
    main = container(gpu="1", mem="3000")
    main["resources"]["requests"] = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}
    with pytest.raises(InvalidRequest) as caught:
        pod_request(pod(main))
    assert str(caught.value) == (
        "spec.containers[0].resources.requests['nvidia.com/gpumem'] must equal limits ('3000') "
        "for a GPU resource, got '2000': set the value once, under limits"
    )


@pytest.mark.parametrize(
    ("limits", "where", "message"),
    [
        ({"mem": "9e15"}, "nvidia.com/gpumem", f"must be at most {MAX_MEMORY_MIB}, got '9e15'"),
        ({"mem": "9Ei"}, "nvidia.com/gpumem", f"must be at most {MAX_MEMORY_MIB}, got '9Ei'"),
        ({"gpu": "3e9"}, "nvidia.com/gpu", f"must be at most {MAX_GPUS}, got '3e9'"),
        (
            {"mem": 10, "nvidia.com/priority": "1e19"},
            "nvidia.com/priority",
            "must be at most 9223372036854775807 in magnitude (Kubernetes keeps no larger "
            "quantity), got '1e19'",
        ),
    ],
)
def test_values_beyond_what_the_node_side_represents_are_refused(
    limits: dict[str, Any], where: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        pod_request(pod(container(**limits)))
    assert str(caught.value) == f"spec.containers[0].resources.limits[{where!r}] {message}"


def test_the_largest_values_the_node_side_represents_are_read() -> None:
    single = only(pod(container(gpu=str(MAX_GPUS), mem=str(MAX_MEMORY_MIB))))
    assert (single.gpus, single.memory_mib) == (MAX_GPUS, MAX_MEMORY_MIB)
    assert only(pod(container(mem=f"{MAX_MEMORY_MIB * 2**10}Ki"))).memory_mib == MAX_MEMORY_MIB


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the quantity grammar parses from here on, in order."""
    texts: list[str] = []
    number = quantities._number

    def counted(text: str, value: object, field: str) -> Any:
        texts.append(text)
        return number(text, value, field)

    monkeypatch.setattr(quantities, "_number", counted)
    return texts


def test_every_value_is_parsed_once(monkeypatch: pytest.MonkeyPatch, parsed: list[str]) -> None:
    # Strings read before are kept (quantities._PARSED); what is checked here is that the
    # normalization itself asks for each value once, so nothing is kept during this test.
    monkeypatch.setattr(quantities, "_PARSED", _Forgetful())
    main = container(gpu="2", mem="4Gi", cores="30", **{"nvidia.com/priority": "1"})
    main["resources"]["requests"] = {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096Mi"}
    setup = {"name": "setup", "resources": {"requests": {"nvidia.com/gpumem-percentage": "50"}}}
    normalized = normalize_pod(pod(main, init=(setup,)))
    assert (normalized.request.priority, len(normalized.request.containers)) == (1, 2)
    assert sorted(parsed) == sorted(["50", "2", "4Gi", "30", "1", "2", "4096Mi"])


class _Forgetful(dict[str, Any]):
    def __setitem__(self, key: str, value: Any) -> None:
        pass


def test_a_string_read_before_is_not_parsed_again_but_a_bad_one_is_refused_every_time(
    monkeypatch: pytest.MonkeyPatch, parsed: list[str]
) -> None:
    monkeypatch.setattr(quantities, "_PARSED", {})
    monkeypatch.setattr(quantities, "_PARSED_MAX", 3)
    first = quantities.read_quantity("3Gi", "limits['a']")
    again = quantities.read_quantity("3Gi", "limits['b']")
    assert (first.number, first.binary) == (again.number, again.binary) == (3 * 2**30, True)
    assert parsed == ["3Gi"]
    for field in ("limits['a']", "limits['b']"):  # an error names its own field each time
        with pytest.raises(InvalidRequest, match=re.escape(field)):
            quantities.read_quantity("3 Gi", field)
    assert parsed == ["3Gi", "3 Gi", "3 Gi"]
    for text in ("1", "2", "3", "4"):  # bounded: full, it starts again
        quantities.read_quantity(text, "x")
    assert len(quantities._PARSED) <= 3


def test_the_webhook_call_checks_the_values_of_a_pod_without_gpus_and_nothing_more() -> None:
    plain = pod(container("web", cpu="1"), annotations={"vslice.io/gpu-policy": "best"})
    plain["spec"]["containers"].append({"image": "sidecar"})  # no name: the API server's call
    assert normalize_gpu_pod(plain) is None
    priority_only = pod(container("web", **{"nvidia.com/priority": "1 "}))
    with pytest.raises(InvalidRequest, match=r"limits\['nvidia.com/priority'\] must be a Kub"):
        normalize_gpu_pod(priority_only)
    gpu = pod(container(mem="1Gi"), init=(container("setup", cores=10),))
    assert normalize_gpu_pod(gpu) == normalize_pod(gpu)


def test_containers_without_gpu_resources_are_not_part_of_the_request() -> None:
    manifest = pod(container("web"), container("main", mem=100), container("zero", gpu=0))
    assert [c.name for c in pod_request(manifest).containers] == ["main"]


def test_vslice_annotations_select_and_steer() -> None:
    parsed = request(
        container(mem=100),
        annotations={
            "vslice.io/gpu-type": "A100, H100",
            "vslice.io/gpu-type-exclude": "PCIE",
            "vslice.io/gpu-uuid": "GPU-1,GPU-2",
            "vslice.io/gpu-uuid-exclude": "GPU-3",
            "vslice.io/numa-bind": "TRUE",
            "vslice.io/node-policy": "spread",
            "vslice.io/gpu-policy": "Topology",
        },
    )
    assert parsed.gpu_types == ["a100", "h100"]
    assert parsed.gpu_types_exclude == ["pcie"]
    assert (parsed.gpu_uuids, parsed.gpu_uuids_exclude) == (["GPU-1", "GPU-2"], ["GPU-3"])
    assert (parsed.numa_bind, parsed.node_policy, parsed.gpu_policy) == (True, "spread", "topology")


def test_hami_annotation_spellings_are_aliases() -> None:
    parsed = request(
        container(mem=100),
        annotations={
            "nvidia.com/use-gputype": "A100",
            "nvidia.com/nouse-gputype": "T4",
            "nvidia.com/use-gpuuuid": "GPU-1",
            "nvidia.com/nouse-gpuuuid": "GPU-2",
            "nvidia.com/numa-bind": "true",
            "hami.io/node-scheduler-policy": "spread",
            "hami.io/gpu-scheduler-policy": "binpack",
        },
    )
    assert (parsed.gpu_types, parsed.gpu_types_exclude) == (["a100"], ["t4"])
    assert (parsed.gpu_uuids, parsed.gpu_uuids_exclude) == (["GPU-1"], ["GPU-2"])
    assert (parsed.numa_bind, parsed.node_policy, parsed.gpu_policy) == (True, "spread", "binpack")


def test_the_vslice_spelling_wins_over_the_hami_alias() -> None:
    parsed = request(
        container(mem=100),
        annotations={"vslice.io/gpu-policy": "mutex", "hami.io/gpu-scheduler-policy": "binpack"},
    )
    assert parsed.gpu_policy == "mutex"


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"vslice.io/gpu-policy": "best"},
            "vslice.io/gpu-policy must be one of binpack, mutex, spread, topology, got 'best'",
        ),
        (
            {"hami.io/node-scheduler-policy": "pack"},
            "hami.io/node-scheduler-policy must be one of binpack, spread, got 'pack'",
        ),
        (
            {"vslice.io/numa-bind": "yes"},
            "vslice.io/numa-bind must be one of true, false, got 'yes'",
        ),
    ],
)
def test_unknown_annotation_values_list_the_valid_choices(
    annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        request(container(mem=100), annotations=annotations)
    assert str(caught.value) == message


def test_init_containers_stay_init_and_sidecars_count_as_app_containers() -> None:
    plain = pod_request(pod(container(mem=100), init=(container("setup", mem=50),)))
    assert [(c.name, c.init) for c in plain.containers] == [("setup", True), ("main", False)]
    sidecar = {**container("proxy", mem=10), "restartPolicy": "Always"}
    with_sidecar = pod_request(pod(container(mem=100), init=(container("setup", mem=50), sidecar)))
    assert [(c.name, c.init) for c in with_sidecar.containers] == [
        ("setup", False),
        ("proxy", False),
        ("main", False),
    ]


def test_pod_identity_and_priority_are_read() -> None:
    manifest = pod(
        container("main", mem=100, **{"nvidia.com/priority": "1"}), namespace="team-a", name="x"
    )
    parsed = pod_request(manifest)
    assert (parsed.name, parsed.namespace, parsed.uid, parsed.priority) == (
        "x",
        "team-a",
        "uid-x",
        1,
    )
    assert pod_request({"spec": {"containers": []}}).namespace == "default"


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ([], "pod must be a mapping (a Pod manifest), got []"),
        ({"spec": {"containers": "main"}}, "spec.containers must be a list, got 'main'"),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            "spec.containers[0].name must be a non-empty string, got None",
        ),
        ({"spec": {"containers": [7]}}, "spec.containers[0] must be a mapping, got 7"),
        (
            {"metadata": {"annotations": {"vslice.io/numa-bind": True}}},
            "vslice.io/numa-bind must be a string, got True",
        ),
        (
            {"spec": {"containers": [{"name": "a", "resources": {"limits": [1]}}]}},
            "spec.containers[0].resources.limits must be a mapping, got [1]",
        ),
    ],
)
def test_malformed_manifests_are_invalid_requests(manifest: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        pod_request(manifest)
    assert str(caught.value) == message


def test_the_limit_patch_creates_missing_parents_and_escapes_slashes() -> None:
    manifest = pod({"name": "main", "resources": {"requests": {"nvidia.com/gpucores": 10}}})
    del manifest["spec"]["containers"][0]["resources"]["requests"]
    manifest["spec"]["containers"][0] = {"name": "main"}
    manifest["spec"]["initContainers"] = [container("setup", mem=5)]
    manifest["spec"]["containers"].append(container("b", cores=5))
    normalized = normalize_pod(manifest)
    assert limit_patch(manifest, normalized.changes) == [
        {
            "op": "add",
            "path": "/spec/initContainers/0/resources/limits/nvidia.com~1gpu",
            "value": "1",
        },
        {"op": "add", "path": "/spec/containers/1/resources/limits/nvidia.com~1gpu", "value": "1"},
    ]
    bare = pod({"name": "main", "resources": {"requests": {"nvidia.com/gpu": 1}}})
    assert limit_patch(bare, normalize_pod(bare).changes) == [
        {"op": "add", "path": "/spec/containers/0/resources/limits", "value": {}},
        {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"},
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
            "value": "100",
        },
    ]
    nothing = pod({"name": "main"}, init=({"name": "setup"},))
    assert limit_patch(nothing, []) == []


def test_uses_gpus_looks_at_every_container_kind_without_validating() -> None:
    assert uses_gpus(pod(container(gpu="junk")))
    assert uses_gpus(pod(container("main"), init=(container("setup", cores=5),)))
    assert not uses_gpus(pod(container("main", cpu=1)))
    assert not uses_gpus({"spec": "nonsense"})


def test_resource_names_are_configurable() -> None:
    names = ResourceNames(gpu="example.com/gpu", memory="example.com/vram")
    manifest = pod({"name": "main", "resources": {"limits": {"example.com/vram": 512}}})
    normalized = normalize_pod(manifest, names)
    assert normalized.request.containers[0].memory_mib == 512
    assert normalized.changes[0].resource == "example.com/gpu"
    assert normalize_pod(pod(container(mem=512)), names).request.containers == []


junk = st.none() | st.booleans() | st.integers(-5, 200) | st.floats() | st.text(max_size=6)
resource_values = junk | st.sampled_from(
    ("1", "4Gi", "50", "0", "101", "1.5", "2e3", "-1", "", "3k", "3000", " 1", "\u0661", "9Ei")
)
limits = st.dictionaries(
    st.sampled_from((*DEFAULT_RESOURCE_NAMES.managed(), "nvidia.com/priority", "cpu")),
    resource_values,
    max_size=4,
)
containers = st.fixed_dictionaries(
    {"name": st.text(min_size=0, max_size=3) | st.none()},
    optional={
        "resources": st.fixed_dictionaries({}, optional={"limits": limits, "requests": limits})
        | junk,
        "restartPolicy": st.sampled_from(("Always", "Never")),
    },
)
annotation_values = st.dictionaries(
    st.sampled_from((*HAMI_ALIASES, *HAMI_ALIASES.values())),
    st.text(max_size=8) | st.sampled_from(("true", "spread", "mutex", "A100,T4")) | junk,
    max_size=3,
)
manifests = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"annotations": annotation_values}) | junk,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(containers, max_size=3) | junk,
                "initContainers": st.lists(containers, max_size=2),
            },
        )
        | junk,
    },
)


@given(manifests)
def test_any_manifest_normalizes_or_raises_an_invalid_request(manifest: dict[str, Any]) -> None:
    try:
        normalized = normalize_pod(manifest)
    except InvalidRequest as error:
        assert error.field and str(error).startswith(error.field)
        return
    for wanted in normalized.request.containers:
        assert wanted.gpus >= 1 and 0 <= wanted.cores <= 100
        assert (wanted.memory_mib is None) != (wanted.memory_percent is None)
        assert wanted.gpus <= MAX_GPUS and (wanted.memory_mib or 0) <= MAX_MEMORY_MIB
    limit_patch(manifest, normalized.changes)


@given(manifests)
def test_the_webhook_call_agrees_with_the_normalization(manifest: dict[str, Any]) -> None:
    try:
        normalized = normalize_gpu_pod(manifest)
    except InvalidRequest:
        with pytest.raises(InvalidRequest):
            normalize_pod(manifest)
        return
    assert (normalized is not None) == uses_gpus(manifest)
    if normalized is not None:
        assert normalized == normalize_pod(manifest)


@pytest.mark.parametrize(
    ("manifest", "count_only"),
    [
        (pod(container(gpu="2")), True),
        (pod(container("side", cpu="1"), container(gpu="1")), True),
        (pod(container(gpu="1"), init=(container("prep", gpu="1"),)), True),
        (pod(container(gpu="1", mem="1024")), False),
        (pod(container(gpu="1", pct="100")), False),
        # What the webhook writes on the extender path: never served by name.
        (pod(container(gpu="1", cores="100")), False),
        (pod(container(gpu="1"), container("b", gpu="1", mem="1024")), False),
        (pod(container(gpu="1", **{"nvidia.com/priority": "1"})), False),
        (pod(container(gpu="1"), annotations={"nvidia.com/use-gputype": "l4"}), False),
        (pod(container(gpu="1"), annotations={"nvidia.com/nouse-gpuuuid": "GPU-1"}), False),
        (pod(container(gpu="1"), annotations={"nvidia.com/numa-bind": "true"}), False),
        (pod(container(cpu="1")), False),
    ],
)
def test_a_pod_asks_whole_gpus_by_count_alone_only_with_the_gpu_name_and_no_selection(
    manifest: dict[str, Any], count_only: bool
) -> None:
    assert normalize_pod(manifest).count_only is count_only
