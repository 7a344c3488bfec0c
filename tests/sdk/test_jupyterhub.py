"""JupyterHub: slice presets become KubeSpawner profile_list entries."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from vslice import InvalidRequest, Slice
from vslice.jupyterhub import Preset, profile_list


def test_presets_become_profiles_with_limits_and_annotations() -> None:
    profiles = profile_list(
        [
            Preset("small", "Small slice", Slice("8Gi", cores=25)),
            Preset(
                "a100-half",
                "Half an A100",
                Slice("50%", cores=50, gpu_type="A100"),
                override={"image": "quay.io/jupyter/pytorch-notebook"},
            ),
        ],
        default="small",
    )
    small, half = profiles
    assert small == {
        "display_name": "Small slice",
        "slug": "small",
        "description": "1 GPU: 8 GiB GPU memory, 25% of the cores",
        "default": True,
        "kubespawner_override": {
            "extra_resource_limits": {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "8192",
                "nvidia.com/gpucores": "25",
            }
        },
    }
    override = half["kubespawner_override"]
    assert override["extra_annotations"] == {"vslice.io/gpu-type": "A100"}
    assert override["image"] == "quay.io/jupyter/pytorch-notebook"
    assert "default" not in half


def test_an_unknown_default_lists_the_presets() -> None:
    presets = [Preset("a", "A", Slice("1Gi")), Preset("b", "B", Slice("2Gi"))]
    with pytest.raises(
        InvalidRequest, match=re.escape("No such preset: 'c'. Options include: a, b")
    ):
        profile_list(presets, default="c")


def test_slugs_must_be_unique_and_well_formed() -> None:
    with pytest.raises(InvalidRequest, match="repeated: a"):
        profile_list([Preset("a", "A", Slice("1Gi")), Preset("a", "B", Slice("2Gi"))])
    with pytest.raises(InvalidRequest, match="'Big GPU'"):
        Preset("Big GPU", "Big", Slice("1Gi"))


def test_override_merges_into_the_slice_limits() -> None:
    (profile,) = profile_list(
        [Preset("x", "X", Slice("1Gi"), override={"extra_resource_limits": {"cpu": "2"}})]
    )
    limits = profile["kubespawner_override"]["extra_resource_limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "cpu": "2"}


def test_a_preset_without_a_slice_is_a_server_without_a_gpu() -> None:
    (profile,) = profile_list([Preset("cpu", "CPU only", None)])
    assert profile["kubespawner_override"] == {}
    assert profile["description"] == "No GPU"


class _Config:
    """Stands in for JupyterHub's ``c``: attribute sections created on first access."""

    def __getattr__(self, name: str) -> SimpleNamespace:
        section = SimpleNamespace()
        setattr(self, name, section)
        return section


def test_the_documented_hub_config_runs_and_yields_profiles() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "jupyterhub.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    config = _Config()
    exec(compile(example, "docs/jupyterhub.md", "exec"), {"c": config})
    profiles = config.KubeSpawner.profile_list
    assert [p["slug"] for p in profiles] == ["cpu", "small", "t4-half", "a100-40g", "h100-pair"]
    assert [p.get("default", False) for p in profiles] == [False, True, False, False, False]
    pair = profiles[-1]["kubespawner_override"]
    assert pair["extra_resource_limits"] == {"nvidia.com/gpu": "2"}
    assert pair["extra_annotations"]["vslice.io/gpu-policy"] == "topology"
