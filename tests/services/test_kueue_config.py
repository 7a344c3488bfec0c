"""``vslice kueue config``: the Kueue Configuration fragment is accepted by Kueue's own loader
and makes Kueue's own workload code count a job's slices as totals (GiB of GPU memory and
percent of SMs across its GPUs), and the queue objects hold one cohort of teams. Kueue's code
runs in tests/services/kueue_check (sigs.k8s.io/kueue at vslice_build.versions.KUEUE_VERSION)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from vslice_build.versions import KUEUE_VERSION
from vslice_control.install.kueue import (
    CORES_RESOURCE,
    DRA_CLAIMS_RESOURCE,
    MEMORY_RESOURCE,
    TeamQuota,
    configuration,
    queue_objects,
)
from vslice_core.errors import InvalidRequest
from vslice_core.resources import ResourceNames


def pod(*containers: dict[str, str]) -> dict[str, Any]:
    """A pod template's spec whose containers set these limits (as users write them)."""
    return {
        "containers": [
            {"name": f"c{i}", "image": "x", "resources": {"limits": limits}}
            for i, limits in enumerate(containers)
        ]
    }


def counted(
    kueue_check: Path, tmp_path: Path, config: dict[str, Any], pods: list[dict[str, Any]]
) -> dict[str, Any]:
    """What Kueue's code makes of ``config`` and of each pod spec."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [str(kueue_check), str(path)],
        input=json.dumps(pods),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_the_checker_uses_the_kueue_version_vslice_pins() -> None:
    mod = (Path(__file__).parent / "kueue_check" / "go.mod").read_text()
    assert f"sigs.k8s.io/kueue {KUEUE_VERSION}" in mod


def test_kueue_counts_a_jobs_slices_as_totals_across_its_gpus(
    kueue_check: Path, tmp_path: Path
) -> None:
    pods = [
        # Two GPUs of 20 GiB and 30 % each: 40 GiB and 60 % in all.
        pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "30"}),
        # One slice of 4 GiB without a compute share, beside a CPU container.
        pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}, {"cpu": "2"}),
        # A share of an unknown card: no memory Kueue could count; the GPU still counts.
        pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}),
    ]
    report = counted(kueue_check, tmp_path, configuration(), pods)
    assert report["error"] == ""
    assert report["requests"] == [
        # Kueue writes the product in bytes: 40 GiB against a quota written "40Gi".
        {"nvidia.com/gpu": "2", MEMORY_RESOURCE: str(40 << 30), CORES_RESOURCE: "60"},
        {"nvidia.com/gpu": "1", MEMORY_RESOURCE: str(4 << 30), "cpu": "2"},
        {"nvidia.com/gpu": "1"},
    ]


def test_without_the_fragment_kueue_would_count_per_gpu_values(
    kueue_check: Path, tmp_path: Path
) -> None:
    # The control: what a ClusterQueue would add up without vslice's transformations.
    pods = [pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "20480"})]
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    report = counted(kueue_check, tmp_path, config, pods)
    assert report["requests"] == [{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "20480"}]


def test_other_resource_names_are_followed(kueue_check: Path, tmp_path: Path) -> None:
    names = ResourceNames(gpu="example.com/vgpu", memory="example.com/vmem")
    pods = [pod({"example.com/vgpu": "3", "example.com/vmem": "1024"})]
    report = counted(kueue_check, tmp_path, configuration(names), pods)
    assert report["requests"] == [{"example.com/vgpu": "3", MEMORY_RESOURCE: str(3 << 30)}]


def test_kueue_refuses_a_broken_fragment_so_the_checker_can_fail(
    kueue_check: Path, tmp_path: Path
) -> None:
    broken = configuration()
    broken["resources"]["transformations"].append(broken["resources"]["transformations"][0])
    report = counted(kueue_check, tmp_path, broken, [])
    assert "resources.transformations[3].input" in report["error"]


def test_the_teams_share_one_cohort_and_each_namespace_has_its_queue() -> None:
    teams = [
        TeamQuota("team-a", "team-a", 2, "40Gi", 200),
        TeamQuota("team-b", "research", 2, "40Gi", 200),
    ]
    flavor, queue_a, queue_b, local_a, local_b = queue_objects(teams, dra_claims=8)
    assert flavor["kind"] == "ResourceFlavor" and "spec" not in flavor
    assert {queue_a["spec"]["cohortName"], queue_b["spec"]["cohortName"]} == {"vslice"}
    assert queue_b["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "research"}
    }
    (group,) = queue_a["spec"]["resourceGroups"]
    assert group["coveredResources"] == [
        "nvidia.com/gpu",
        MEMORY_RESOURCE,
        CORES_RESOURCE,
        "cpu",
        "memory",
        DRA_CLAIMS_RESOURCE,
    ]
    quotas = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    assert quotas == {
        "nvidia.com/gpu": "2",
        MEMORY_RESOURCE: "40Gi",
        CORES_RESOURCE: "200",
        # Kueue admits no job whose requests its ClusterQueue does not cover: CPU and host
        # memory are covered too, with the defaults.
        "cpu": "64",
        "memory": "256Gi",
        DRA_CLAIMS_RESOURCE: "8",
    }
    assert queue_a["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert (local_b["metadata"], local_b["spec"]) == (
        {"name": "team-b", "namespace": "research"},
        {"clusterQueue": "team-b"},
    )
    assert local_a["metadata"]["namespace"] == "team-a"


def test_bad_teams_are_refused_naming_each_field() -> None:
    with pytest.raises(InvalidRequest) as raised:
        queue_objects(
            [
                TeamQuota("Team_A", "ok", -1, "40 GB", 10, cpu="lots"),
                TeamQuota("b", "b", 1, "1", 1),
            ]
        )
    message = str(raised.value)
    assert "cpu 'lots' is not a quantity" in message
    assert "name 'Team_A' is not a DNS label" in message
    assert "memory '40 GB' is not a whole quantity" in message
    assert "gpus -1 is negative" in message
    with pytest.raises(InvalidRequest, match="given twice"):
        queue_objects([TeamQuota("a", "a", 1, "1Gi", 1), TeamQuota("a", "x", 1, "1Gi", 1)])
    with pytest.raises(InvalidRequest, match="no team given"):
        queue_objects([])


def test_the_command_prints_the_fragment_then_the_queues() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "kueue", "config", "--team", "a", "--team", "b=lab"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    kinds = [
        (d["kind"], d.get("metadata", {}).get("name")) for d in yaml.safe_load_all(done.stdout)
    ]
    assert kinds == [
        ("Configuration", None),
        ("ResourceFlavor", "vslice-gpu"),
        ("ClusterQueue", "a"),
        ("ClusterQueue", "b"),
        ("LocalQueue", "a"),
        ("LocalQueue", "b"),
    ]
    refused = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "kueue", "config", "--team", "a", "--memory", "4GB"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "memory '4GB' is not a whole quantity" in refused.stderr
    assert "Traceback" not in refused.stderr


SITE = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "waitForPodsReady": {"timeout": "5m"},
    "resources": {
        "excludeResourcePrefixes": ["example.com/"],
        "transformations": [
            # The site's own, kept; and a stale vslice one, replaced.
            {"input": "nvidia.com/mig-1g.5gb", "strategy": "Replace", "outputs": {"x/y": "1"}},
            {"input": "nvidia.com/gpumem", "strategy": "Retain"},
        ],
    },
}


def test_merging_keeps_the_sites_settings_replaces_vslices_and_kueue_loads_it(
    kueue_check: Path, tmp_path: Path
) -> None:
    from vslice_control.install.kueue import merge_configuration

    merged = merge_configuration(SITE, configuration())
    assert merged["waitForPodsReady"] == SITE["waitForPodsReady"]
    assert merged["resources"]["excludeResourcePrefixes"] == ["example.com/"]
    inputs = [(t["input"], t["strategy"]) for t in merged["resources"]["transformations"]]
    assert inputs == [
        ("nvidia.com/mig-1g.5gb", "Replace"),
        ("nvidia.com/gpumem", "Replace"),
        ("nvidia.com/gpucores", "Replace"),
        ("nvidia.com/gpumem-percentage", "Replace"),
    ]
    assert merge_configuration(merged, configuration()) == merged  # a second run: no change
    assert SITE["resources"]["transformations"][1]["strategy"] == "Retain"  # input untouched
    report = counted(
        kueue_check,
        tmp_path,
        merged,
        [pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024"})],
    )
    assert report["error"] == ""
    assert report["requests"] == [{"nvidia.com/gpu": "2", MEMORY_RESOURCE: str(2 << 30)}]


def test_the_merge_command_reads_a_file_and_names_a_bad_one(tmp_path: Path) -> None:
    site = tmp_path / "controller_manager_config.yaml"
    site.write_text(yaml.safe_dump(SITE))
    done = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "kueue", "merge", str(site)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["waitForPodsReady"] == SITE["waitForPodsReady"]
    site.write_text("- a list\n")
    refused = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "kueue", "merge", str(site)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "must hold a Kueue Configuration mapping, got list" in refused.stderr


def test_the_install_part_holds_the_teams_of_the_values() -> None:
    from vslice_control.install.manifests import objects
    from vslice_control.install.values import parse_values

    assert objects(parse_values({}), ["kueue-queues"]) == []
    values = parse_values(
        {"kueue": {"queues": True, "teams": [{"name": "a"}, {"name": "v", "namespace": "cv"}]}}
    )
    kinds = [(o["kind"], o["metadata"].get("namespace")) for o in objects(values, ["kueue-queues"])]
    assert kinds == [
        ("ResourceFlavor", None),
        ("ClusterQueue", None),
        ("ClusterQueue", None),
        ("LocalQueue", "a"),
        ("LocalQueue", "cv"),
    ]
    with pytest.raises(InvalidRequest, match=r"kueue\.teams"):
        parse_values({"kueue": {"teams": [{"name": "a", "gpus": -1}]}})
