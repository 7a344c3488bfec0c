"""``vslice lab status|down|import-image|kubectl`` find the lab without a control plane running:
a recorded lab (``lab.json``) with no processes stands in for one."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from vslice_build.images import SMOKE_IMAGE, ImageFile, ImageSpec, write_archive
from vslice_lab import state
from vslice_lab.layout import Layout
from vslice_lab.state import LabRecord
from vslice_ops.lab import archive_image_names

PORT_NAMES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "vslice-scheduler",
    "vslice-webhook",
)


def _record_lab(state_dir: Path, version: str = "v1.36.3") -> Layout:
    layout = Layout.at(state_dir)
    # Port 9 (discard) answers nothing, so `status` reports the API as not answering.
    ports = dict.fromkeys(PORT_NAMES, 9)
    state.save(layout, LabRecord(version=version, ports=ports, nodes=["lab-t4"]))
    return layout


def _vslice(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vslice.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


@pytest.fixture
def elsewhere(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory without a ``.lab`` and a private place for the last-lab note."""
    work = tmp_path / "work"
    work.mkdir()
    return work, {"XDG_STATE_HOME": str(tmp_path / "state")}


def test_status_without_state_dir_finds_the_lab_the_last_up_started_elsewhere(
    tmp_path: Path, elsewhere: tuple[Path, dict[str, str]]
) -> None:
    work, env = elsewhere
    layout = _record_lab(tmp_path / "mylab")
    note = Path(env["XDG_STATE_HOME"]) / "vslice" / "last-lab"
    note.parent.mkdir(parents=True)
    note.write_text(f"{layout.root}\n")

    status = _vslice("lab", "status", cwd=work, env=env)

    assert "no lab recorded" not in status.stdout, status.stdout
    assert "API server https://127.0.0.1:9" in status.stdout
    assert f"using the lab in {layout.root}" in status.stderr


def test_remember_writes_the_note_that_find_falls_back_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    layout = _record_lab(tmp_path / "mylab")
    state.remember(layout)
    found, noted = state.find(None, tmp_path / "no-lab-here")
    assert (found, noted) == (layout, True)


def test_a_lab_in_dot_lab_here_wins_over_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    state.remember(_record_lab(tmp_path / "noted"))
    here = _record_lab(tmp_path / ".lab")
    assert state.find(None, tmp_path / ".lab") == (here, False)


def test_an_explicit_state_dir_wins_even_without_a_lab_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    state.remember(_record_lab(tmp_path / "noted"))
    assert state.find(tmp_path / "empty", tmp_path / ".lab") == (
        Layout.at(tmp_path / "empty"),
        False,
    )


def test_down_without_state_dir_stops_the_noted_lab_and_drops_the_note(
    tmp_path: Path, elsewhere: tuple[Path, dict[str, str]]
) -> None:
    work, env = elsewhere
    layout = _record_lab(tmp_path / "mylab")
    note = Path(env["XDG_STATE_HOME"]) / "vslice" / "last-lab"
    note.parent.mkdir(parents=True)
    note.write_text(f"{layout.root}\n")

    down = _vslice("lab", "down", cwd=work, env=env)

    assert down.returncode == 0, down.stderr
    assert "stopped: nothing was running" in down.stdout
    assert not layout.record.exists() and not note.exists()
    after = _vslice("lab", "status", cwd=work, env=env)
    assert after.returncode == 1 and "no lab recorded" in after.stdout


def test_lab_kubectl_runs_the_labs_kubectl_with_the_labs_kubeconfig(
    tmp_path: Path, elsewhere: tuple[Path, dict[str, str]]
) -> None:
    work, env = elsewhere
    layout = _record_lab(tmp_path / "mylab")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\nexit 3\n')
    fake.chmod(0o755)

    ran = _vslice(
        "lab",
        "kubectl",
        "--state-dir",
        str(layout.root),
        "get",
        "pods",
        "-n",
        "team-a",
        cwd=work,
        env={**env, "VSLICE_LAB_BIN_DIR": str(bin_dir)},
    )

    assert ran.stdout.split() == [
        "--kubeconfig",
        str(layout.kubeconfig),
        "get",
        "pods",
        "-n",
        "team-a",
    ]
    assert ran.returncode == 3  # kubectl's own exit status


def test_lab_kubectl_without_a_lab_says_so_and_fails(
    elsewhere: tuple[Path, dict[str, str]],
) -> None:
    work, env = elsewhere
    ran = _vslice("lab", "kubectl", "get", "nodes", cwd=work, env=env)
    assert ran.returncode == 1
    assert "no lab recorded" in ran.stderr


def test_an_archive_written_by_the_lab_is_named_as_its_image(tmp_path: Path) -> None:
    archive = tmp_path / "smoke.tar"
    spec = ImageSpec(name=SMOKE_IMAGE, files=[ImageFile("/hello", data=b"hi\n")])
    write_archive(spec, archive)
    assert archive_image_names(archive) == [SMOKE_IMAGE]


def _tar(path: Path, members: dict[str, object]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, content in members.items():
            data = json.dumps(content).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_bare_oci_tag_gets_ctrs_import_prefix_and_a_full_name_stays(tmp_path: Path) -> None:
    index = {
        "manifests": [
            {"annotations": {"org.opencontainers.image.ref.name": "1"}},
            {"annotations": {"org.opencontainers.image.ref.name": "localhost/myimage:1"}},
        ]
    }
    archive = _tar(tmp_path / "oci.tar", {"index.json": index})
    assert archive_image_names(archive, today="2026-01-02") == [
        "import-2026-01-02:1",
        "localhost/myimage:1",
    ]


def test_a_docker_archive_is_named_by_its_repo_tags(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "docker.tar", {"manifest.json": [{"RepoTags": ["myimage:1"]}]})
    assert archive_image_names(archive) == ["myimage:1"]


def test_an_archive_without_names_gives_none(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "anon.tar", {"index.json": {"manifests": [{"digest": "x"}]}})
    assert archive_image_names(archive) == []


def test_import_image_wants_an_archive_or_the_workload_image_not_both(
    elsewhere: tuple[Path, dict[str, str]],
) -> None:
    work, env = elsewhere
    for argv in (("lab", "import-image"), ("lab", "import-image", "x.tar", "--workload")):
        ran = _vslice(*argv, cwd=work, env=env)
        assert ran.returncode == 2, ran.stderr
        assert "give either an archive or --workload" in ran.stderr
