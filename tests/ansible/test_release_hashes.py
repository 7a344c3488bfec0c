"""The vslice_release role installs a bundle's wheels in pip's hash-checking mode: exactly the
wheels the manifest lists, each checked against its sha256 on the host, with no index.

The role runs here as site.yml runs it (the install and the switch of ``current``), on this
host, into a prefix of its own; the wheels are small real ones: a ``vslice`` with a console
script and one dependency."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from bringup import ROLES, run, tool

pytestmark = pytest.mark.timeout(600)

WHEEL = "vslice-0.1.0-py3-none-any.whl"
DEPENDENCY = "tinydep-1.0-py3-none-any.whl"
EXTRA = "extradep-1.0-py3-none-any.whl"


def _wheel(
    path: Path, name: str, version: str, *, requires: str = "", script: bool = False
) -> None:
    """A minimal wheel pip installs: one module, its metadata, optionally a console script."""
    module = name.replace("-", "_") + "_mod"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f"def main() -> None:\n    print('{name} {version} runs')\n",
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + (f"Requires-Dist: {requires}\n" if requires else "")
        ),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    if script:
        files[f"{info}/entry_points.txt"] = f"[console_scripts]\nvslice = {module}:main\n"
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def bundle(tmp_path: Path) -> dict[str, Path]:
    wheel_dir, wheelhouse = tmp_path / "wheel", tmp_path / "wheelhouse"
    wheel_dir.mkdir()
    wheelhouse.mkdir()
    _wheel(wheel_dir / WHEEL, "vslice", "0.1.0", requires="tinydep", script=True)
    _wheel(wheelhouse / DEPENDENCY, "tinydep", "1.0")
    return {"wheel": wheel_dir / WHEEL, "wheelhouse": wheelhouse, "prefix": tmp_path / "opt"}


def _hashes(bundle: dict[str, Path]) -> dict[str, str]:
    return {
        WHEEL: _sha256(bundle["wheel"]),
        DEPENDENCY: _sha256(bundle["wheelhouse"] / DEPENDENCY),
    }


def _install(tmp_path: Path, bundle: dict[str, Path], hashes: dict[str, str]) -> str:
    playbook = tmp_path / "release.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: true\n  roles: [vslice_release]\n"
    )
    variables = tmp_path / "vars.json"
    variables.write_text(
        json.dumps(
            {
                "vslice_release_wheel": str(bundle["wheel"]),
                "vslice_release_wheelhouse": str(bundle["wheelhouse"]),
                "vslice_release_prefix": str(bundle["prefix"]),
                "vslice_release_hashes": hashes,
            }
        )
    )
    done = run(
        tool("ansible-playbook"),
        "-i",
        "localhost,",
        "-e",
        f"@{variables}",
        "-e",
        f"ansible_python_interpreter={tool('python')}",
        str(playbook),
        cwd=ROLES.parent,
    )
    return ("ok\n" if done.returncode == 0 else "failed\n") + done.stdout + done.stderr


def test_the_listed_wheels_install_with_their_hashes_and_the_release_runs(
    tmp_path: Path, bundle: dict[str, Path]
) -> None:
    _wheel(bundle["wheelhouse"] / EXTRA, "extradep", "1.0")
    said = _install(tmp_path, bundle, _hashes(bundle))
    assert said.startswith("ok\n"), said[-3000:]
    current = bundle["prefix"] / "current"
    requirements = (current / "requirements.txt").read_text()
    assert f"/wheels/{WHEEL} --hash=sha256:{_sha256(bundle['wheel'])}" in requirements
    assert f"/wheelhouse/{DEPENDENCY} --hash=sha256:" in requirements
    site = next((current / "lib").glob("python3*/site-packages"))
    assert (site / "tinydep_mod").is_dir()
    # A wheel beside the listed ones is copied with the wheelhouse but never installed.
    assert not (site / "extradep_mod").exists()
    ran = run(str(current / "bin" / "vslice"))
    assert ran.stdout.strip() == "vslice 0.1.0 runs"


def test_a_wheel_that_differs_from_its_listed_hash_is_refused_on_the_host(
    tmp_path: Path, bundle: dict[str, Path]
) -> None:
    hashes = _hashes(bundle)
    # Changed after the manifest was sealed (and after any check on the controller).
    _wheel(bundle["wheelhouse"] / DEPENDENCY, "tinydep", "1.0", requires="os-system-id")
    said = _install(tmp_path, bundle, hashes)
    assert said.startswith("failed\n"), said[-3000:]
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in said, said[-3000:]
    assert DEPENDENCY in said
    assert not (bundle["prefix"] / "current").exists()


def test_a_dependency_the_hashes_do_not_list_is_not_fetched_from_anywhere(
    tmp_path: Path, bundle: dict[str, Path]
) -> None:
    hashes = _hashes(bundle)
    del hashes[DEPENDENCY]
    said = _install(tmp_path, bundle, hashes)
    assert said.startswith("failed\n"), said[-3000:]
    assert "tinydep" in said, said[-3000:]
    assert not (bundle["prefix"] / "current").exists()


def test_hashes_without_the_wheel_or_with_a_bad_digest_stop_in_the_preflight(
    tmp_path: Path, bundle: dict[str, Path]
) -> None:
    for hashes in ({DEPENDENCY: "0" * 64}, {**_hashes(bundle), DEPENDENCY: "not-a-digest"}):
        said = _install(tmp_path, bundle, hashes)
        assert said.startswith("failed\n"), said[-3000:]
        assert "vslice_release_hashes must map the wheel's file name" in said, said[-3000:]
        assert not (bundle["prefix"] / "releases").exists()
