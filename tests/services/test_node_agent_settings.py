"""The node agent's grouped settings, and the flat keys and variables that still select them.

Files and environments written before the groups (the lab's, the Ansible role's, operators')
name every setting flat; each must keep its meaning, in the file and as ``VSLICE_<KEY>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from vslice_core.errors import InvalidRequest
from vslice_node.agent.flatkeys import FLAT_KEYS, regroup
from vslice_node.agent.groups import GROUPS
from vslice_node.agent.settings import NodeAgentSettings
from vslice_serving.settings import load_settings

BASE = {"backend": "static", "inventory": "inventory.yaml", "node_name": "node-1"}

# A value other than the default for every flat key, as an old settings file would give it.
FLAT_VALUES: dict[str, Any] = {
    "cache_root": "/srv/containers",
    "container_cache_root": "/run/slices",
    "limits_root": "/srv/limits",
    "shim_library": "/opt/vslice/libvslice.so",
    "preload_file": "/opt/vslice/ld.so.preload",
    "context_overhead": "300m",
    "shim_log_level": "debug",
    "injection": "cdi",
    "region_sweep_seconds": 5,
    "region_grace_seconds": 7,
    "memory_backend": "shim",
    "memory_limit_hook": "/opt/vslice/bin/vslice-memory-limit",
    "driver_libraries": ["/opt/fake/libcuda.so.1"],
    "driver_container_dir": "/opt/nvidia/lib",
    "driver_env": {"FAKE_NVIDIA_GPUS": 2},
    "driver_mounts": [{"host_path": "/srv/state", "container_path": "/var/state"}],
    "host_dev_dir": "/srv/dev",
    "driver_cdi_devices": ["nvidia.com/gpu={uuid}"],
    "driver_nvml_library": "/opt/fake/libnvidia-ml.so.1",
    "driver_host_env": {"FAKE_CUDA_STATE": "/srv/state"},
    "cdi_spec_dir": "/srv/cdi",
    "cdi_kind": "example.com/slice",
    "device_plugin_dir": "/srv/device-plugins",
    "socket_name": "slices.sock",
    "resource_name": "example.com/gpu",
    "pod_resources_socket": "",
    "allocation_key_file": "/etc/vslice/keys",
    "annotate_every_seconds": 30,
    "kubelet_poll_seconds": 0.5,
    "api_wait_seconds": 3,
    "dra": True,
    "dra_gpus": [1, 2],
    "kubelet_plugins_registry": "/srv/registry",
    "kubelet_plugins_dir": "/srv/plugins",
    "dra_socket": "/run/dra.sock",
    "dra_publish_seconds": 15,
}


@pytest.fixture(autouse=True)
def _no_vslice_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process environment must not leak settings into these tests."""
    for name in list(os.environ):
        if name.upper().startswith("VSLICE_"):
            monkeypatch.delenv(name)


def config(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "device-plugin.yaml"
    path.write_text(yaml.safe_dump({**BASE, **values}))
    return path


def grouped(settings: NodeAgentSettings, flat: str) -> Any:
    group, leaf = FLAT_KEYS[flat]
    return getattr(getattr(settings, group), leaf)


def nested(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flat, value in values.items():
        group, leaf = FLAT_KEYS[flat]
        out.setdefault(group, {})[leaf] = value
    return out


def test_every_grouped_setting_has_exactly_one_flat_key() -> None:
    places = list(FLAT_KEYS.values())
    assert len(places) == len(set(places))
    fields = {(group, leaf) for group, model in GROUPS.items() for leaf in model.model_fields}
    assert set(places) == fields
    # A flat key never shadows a setting of the top or a group's own key.
    assert not set(FLAT_KEYS) & set(NodeAgentSettings.model_fields)
    assert set(GROUPS) <= set(NodeAgentSettings.model_fields)
    assert set(FLAT_VALUES) == set(FLAT_KEYS)


def test_every_flat_key_of_a_file_sets_its_grouped_setting(tmp_path: Path) -> None:
    settings = load_settings(NodeAgentSettings, config(tmp_path, FLAT_VALUES))
    assert settings.handover.cache_root == "/srv/containers"
    assert settings.cdi.spec_dir == "/srv/cdi"
    assert settings.driver.env == {"FAKE_NVIDIA_GPUS": "2"}
    assert settings.driver.mounts[0].read_only is True
    assert settings.device_plugin.dir == "/srv/device-plugins"
    assert settings.dra_driver.enabled is True
    assert settings.dra_driver.gpus == [1, 2]
    assert settings.dra_driver.socket == "/run/dra.sock"
    for flat, value in FLAT_VALUES.items():
        if flat not in {"driver_env", "driver_mounts"}:
            assert grouped(settings, flat) == value, flat


def test_a_grouped_file_means_the_same_as_the_flat_one(tmp_path: Path) -> None:
    flat = load_settings(NodeAgentSettings, config(tmp_path, FLAT_VALUES))
    (tmp_path / "grouped").mkdir()
    grouped_file = config(tmp_path / "grouped", nested(FLAT_VALUES))
    assert "cache_root" not in grouped_file.read_text().split("handover:")[0]
    assert load_settings(NodeAgentSettings, grouped_file) == flat


def test_flat_and_grouped_keys_mix_in_one_file(tmp_path: Path) -> None:
    values = {"cache_root": "/srv/containers", "cdi": {"spec_dir": "/srv/cdi"}}
    settings = load_settings(NodeAgentSettings, config(tmp_path, values))
    assert settings.handover.cache_root == "/srv/containers"
    assert settings.cdi.spec_dir == "/srv/cdi"
    # Other settings of a group one key of which came flat keep their defaults.
    assert settings.handover.container_cache_root == "/run/vslice"


def test_flat_variables_set_grouped_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VSLICE_CACHE_ROOT", "/env/containers")
    monkeypatch.setenv("VSLICE_DRA", "yes")
    monkeypatch.setenv("VSLICE_DRA_GPUS", "[0, 2]")
    monkeypatch.setenv("VSLICE_DRIVER_ENV", '{"FAKE_NVIDIA_GPUS": "3"}')
    monkeypatch.setenv("VSLICE_DRIVER_ENV__FAKE_CUDA_STATE", "/state")
    monkeypatch.setenv("VSLICE_KUBELET_POLL_SECONDS", "0.5")
    monkeypatch.setenv("VSLICE_DEVICE_PLUGIN_DIR", "/env/device-plugins")
    settings = load_settings(NodeAgentSettings, config(tmp_path, {}))
    assert settings.handover.cache_root == "/env/containers"
    assert settings.dra_driver.enabled is True
    assert settings.dra_driver.gpus == [0, 2]
    # As before the groups, the __ form lower-cases the variable's key.
    assert settings.driver.env == {"FAKE_NVIDIA_GPUS": "3", "fake_cuda_state": "/state"}
    assert settings.device_plugin.kubelet_poll_seconds == 0.5
    assert settings.device_plugin.dir == "/env/device-plugins"


def test_grouped_variables_set_grouped_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VSLICE_HANDOVER__CACHE_ROOT", "/env/containers")
    monkeypatch.setenv("VSLICE_DRA_DRIVER__GPUS", "[1]")
    monkeypatch.setenv("VSLICE_CDI", '{"spec_dir": "/env/cdi"}')
    settings = load_settings(NodeAgentSettings, config(tmp_path, {}))
    assert settings.handover.cache_root == "/env/containers"
    assert settings.dra_driver.gpus == [1]
    assert settings.cdi.spec_dir == "/env/cdi"


@pytest.mark.parametrize(
    ("file", "variable"),
    [
        ({"cache_root": "/file"}, "VSLICE_CACHE_ROOT"),
        ({"handover": {"cache_root": "/file"}}, "VSLICE_CACHE_ROOT"),
        ({"cache_root": "/file"}, "VSLICE_HANDOVER__CACHE_ROOT"),
        ({"handover": {"cache_root": "/file"}}, "VSLICE_HANDOVER__CACHE_ROOT"),
    ],
)
def test_a_variable_wins_over_the_file_whichever_spelling_each_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file: dict[str, Any], variable: str
) -> None:
    monkeypatch.setenv(variable, "/env")
    values = {**file, "container_cache_root": "/run/slices"}
    settings = load_settings(NodeAgentSettings, config(tmp_path, values))
    assert settings.handover.cache_root == "/env"
    # The variable replaces one setting, not the file's whole group.
    assert settings.handover.container_cache_root == "/run/slices"


def test_a_setting_given_both_ways_in_the_file_is_refused_naming_both(tmp_path: Path) -> None:
    values = {"cdi_spec_dir": "/a", "cdi": {"spec_dir": "/b"}}
    with pytest.raises(InvalidRequest) as raised:
        load_settings(NodeAgentSettings, config(tmp_path, values))
    assert "cdi_spec_dir and cdi.spec_dir name the same setting: give only one" in str(raised.value)
    assert raised.value.field == "cdi.spec_dir"


def test_a_setting_given_both_ways_in_the_environment_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VSLICE_DRA", "true")
    monkeypatch.setenv("VSLICE_DRA_DRIVER__ENABLED", "false")
    with pytest.raises(InvalidRequest) as raised:
        load_settings(NodeAgentSettings, config(tmp_path, {}))
    assert "VSLICE_DRA and VSLICE_DRA_DRIVER__ENABLED name the same setting" in str(raised.value)


def test_a_setting_given_both_ways_to_the_constructor_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cache_root and handover\.cache_root name the same"):
        NodeAgentSettings(**BASE, cache_root="/a", handover={"cache_root": "/b"})


@pytest.mark.parametrize(
    ("values", "unknown"),
    [
        ({"cache_rot": "/x"}, "cache_rot"),
        ({"handover": {"cache_rot": "/x"}}, "handover.cache_rot"),
        # A group's own name is not a flat key: the grouped spelling has no prefix.
        ({"cdi": {"cdi_spec_dir": "/x"}}, "cdi.cdi_spec_dir"),
        ({"dra_driver": {"dra": True}}, "dra_driver.dra"),
    ],
)
def test_unknown_keys_are_refused_as_before(
    tmp_path: Path, values: dict[str, Any], unknown: str
) -> None:
    path = config(tmp_path, values)
    with pytest.raises(InvalidRequest) as raised:
        load_settings(NodeAgentSettings, path)
    assert str(raised.value) == f"config file {path}: unknown setting {unknown!r}"


def test_a_bad_flat_value_is_refused_naming_the_grouped_setting(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as raised:
        load_settings(NodeAgentSettings, config(tmp_path, {"kubelet_poll_seconds": 5}))
    assert "device_plugin.kubelet_poll_seconds: Input should be less than or equal to 2" in str(
        raised.value
    )


def test_dra_still_needs_cdi_injection_across_groups(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as raised:
        load_settings(NodeAgentSettings, config(tmp_path, {"dra": True, "injection": "mounts"}))
    assert "dra_driver.enabled needs handover.injection cdi" in str(raised.value)


def test_the_lab_nodes_flat_settings_load_with_their_meaning(tmp_path: Path) -> None:
    from vslice_core.model import NodeInventory
    from vslice_lab.nodeconfig import NodeLayout, ShimBuild, device_plugin_settings

    layout = NodeLayout(tmp_path / "node")
    inventory = NodeInventory(name="n", gpus=[])
    values = device_plugin_settings(
        "n",
        layout,
        tmp_path / "c.yaml",
        inventory,
        ShimBuild(tmp_path / "shim"),
        tmp_path / "k",
        1,
        tmp_path / "keys",
        [2],
    )
    assert not set(values) & set(GROUPS)  # the lab writes the flat keys
    path = tmp_path / "device-plugin.yaml"
    path.write_text(yaml.safe_dump(values))
    settings = load_settings(NodeAgentSettings, path)
    loaded = {key: grouped(settings, key) for key in values if key in FLAT_KEYS}
    loaded["driver_mounts"] = [m.model_dump() for m in settings.driver.mounts]
    assert loaded == {key: value for key, value in values.items() if key in FLAT_KEYS}
    assert {key: getattr(settings, key) for key in values if key not in FLAT_KEYS} == {
        key: value for key, value in values.items() if key not in FLAT_KEYS
    }
    assert settings.dra_driver.enabled and settings.dra_driver.gpus == [2]


def test_regroup_leaves_grouped_and_top_level_keys_alone() -> None:
    data = {"node_name": "n", "handover": {"cache_root": "/a"}, "DRA_GPUS": [1]}
    assert regroup(data) == {
        "node_name": "n",
        "handover": {"cache_root": "/a"},
        "dra_driver": {"gpus": [1]},
    }
