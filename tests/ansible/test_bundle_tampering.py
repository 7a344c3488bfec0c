"""Tampered bundles, each refused by `vslice bundle verify` and by the vslice_bundle role alike,
with a message naming the file and what is wrong with it; the bundle as sealed passes both.

The role runs here as site.yml runs it: on this host, its preflight only, in check mode."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from bringup import ROLES, run, tool
from vslice_build.bundle.manifest import Manifest, Target
from vslice_build.bundle.sums import seal

CHECKER = ROLES / "vslice_bundle" / "files" / "verify_bundle.py"
FILES = {
    "bin/kubeadm": b"kubeadm",
    "shim/libvslice.so": b"\x7fELF",
    "images/pause.tar": b"pause",
    "python/wheel/vslice-0.1.0-py3-none-any.whl": b"vslice wheel",
    "python/wheelhouse/PyYAML-6.0-cp311-cp311-manylinux_2_17_x86_64.whl": b"yaml wheel",
}
# A wheel pip would install (any name, any content) and the file a link or a path points at.
EVIL_WHEEL = b"import os; os.system('id')"
OTHER_ARCH = {"x86_64": "aarch64", "aarch64": "x86_64"}


@pytest.fixture(scope="module")
def here() -> dict[str, str]:
    """This host as Ansible's facts see it: the role compares the bundle's target with them."""
    facts = run(
        tool("ansible"),
        "localhost",
        "-m",
        "ansible.builtin.setup",
        "-a",
        "filter=ansible_distribution*,ansible_architecture",
    )
    assert facts.returncode == 0, facts.stdout[-2000:]
    found: dict[str, str] = json.loads(facts.stdout[facts.stdout.index("{") :])["ansible_facts"]
    assert found["ansible_architecture"] == platform.machine()
    return found


def _seal(root: Path, here: dict[str, str], arch: str | None = None) -> Path:
    """A small bundle sealed the way `vslice bundle build` seals one, for this host."""
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    target = Target(
        "here",
        here["ansible_distribution"],
        str(here["ansible_distribution_major_version"]),
        arch or here["ansible_architecture"],
        "3.11",
        "2.36",
    )
    seal(
        root,
        Manifest(
            vslice_version="0.1.0",
            target=target,
            components={"kubernetes": "v1.36.3"},
            images={},
            wheel="python/wheel/vslice-0.1.0-py3-none-any.whl",
            wheelhouse="python/wheelhouse",
            shim="shim/libvslice.so",
        ),
    )
    return root


def _outside(root: Path, data: bytes = EVIL_WHEEL) -> Path:
    """A file beside the bundle, where a link or a ``../`` path can reach it."""
    path = root.parent / "outside.whl"
    path.write_bytes(data)
    return path


def _add_sums_line(root: Path, path: str, data: bytes) -> None:
    with (root / "SHA256SUMS").open("a") as sums:
        sums.write(f"{hashlib.sha256(data).hexdigest()}  {path}\n")


def _extra_wheel(root: Path) -> None:
    (root / "python" / "wheelhouse" / "evil-1.0-py3-none-any.whl").write_bytes(EVIL_WHEEL)


def _modified(root: Path) -> None:
    (root / "bin" / "kubeadm").write_bytes(b"kubeadX")


def _missing(root: Path) -> None:
    (root / "images" / "pause.tar").unlink()


def _link_inside(root: Path) -> None:
    (root / "bin" / "kubectl").symlink_to("kubeadm")


def _listed_file_is_link_outside(root: Path) -> None:
    """The same bytes, reached through a link: sha256sum follows it and is content."""
    outside = _outside(root, FILES["bin/kubeadm"])
    (root / "bin" / "kubeadm").unlink()
    (root / "bin" / "kubeadm").symlink_to(outside)


def _directory_link_outside(root: Path) -> None:
    outside = root.parent / "host-dir"
    outside.mkdir()
    (outside / "evil-1.0-py3-none-any.whl").write_bytes(EVIL_WHEEL)
    (root / "python" / "wheelhouse" / "more").symlink_to(outside)


def _sums_escape(root: Path) -> None:
    _outside(root)
    _add_sums_line(root, "../outside.whl", EVIL_WHEEL)


def _sums_absolute(root: Path) -> None:
    _add_sums_line(root, str(_outside(root)), EVIL_WHEEL)


def _sums_follow_the_edit(root: Path) -> None:
    """The file edited and its SHA256SUMS line with it, the manifest left as built."""
    (root / "bin" / "kubeadm").write_bytes(b"kubeadX")
    lines = (root / "SHA256SUMS").read_text().splitlines(keepends=True)
    digest = hashlib.sha256(b"kubeadX").hexdigest()
    edited = [
        f"{digest}  bin/kubeadm\n" if line.endswith("  bin/kubeadm\n") else line for line in lines
    ]
    (root / "SHA256SUMS").write_text("".join(edited))


def _sums_omit(root: Path) -> None:
    lines = (root / "SHA256SUMS").read_text().splitlines(keepends=True)
    (root / "SHA256SUMS").write_text("".join(line for line in lines if "bin/kubeadm" not in line))


def _manifest_escape(root: Path) -> None:
    """A ``../`` file listed in the manifest and in SHA256SUMS alike, with its true checksum."""
    _outside(root)
    data = json.loads((root / "manifest.json").read_text())
    data["files"]["../outside.whl"] = {
        "sha256": hashlib.sha256(EVIL_WHEEL).hexdigest(),
        "size": len(EVIL_WHEEL),
    }
    text = (json.dumps(data, indent=1) + "\n").encode()
    (root / "manifest.json").write_bytes(text)
    lines = [
        line
        for line in (root / "SHA256SUMS").read_text().splitlines(keepends=True)
        if not line.endswith("  manifest.json\n")
    ]
    (root / "SHA256SUMS").write_text("".join(lines))
    _add_sums_line(root, "manifest.json", text)
    _add_sums_line(root, "../outside.whl", EVIL_WHEEL)


TAMPERED: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "extra-wheel",
        _extra_wheel,
        "python/wheelhouse/evil-1.0-py3-none-any.whl is not in the manifest",
    ),
    ("modified", _modified, "bin/kubeadm has SHA-256"),
    ("missing", _missing, "images/pause.tar is missing"),
    ("link-inside", _link_inside, "bin/kubectl is a symbolic link (to kubeadm)"),
    ("listed-link-outside", _listed_file_is_link_outside, "bin/kubeadm is a symbolic link"),
    (
        "directory-link-outside",
        _directory_link_outside,
        "python/wheelhouse/more is a symbolic link",
    ),
    ("sums-escape", _sums_escape, "../outside.whl is not a plain path inside the bundle"),
    ("sums-absolute", _sums_absolute, "outside.whl is an absolute path"),
    ("sums-follow-the-edit", _sums_follow_the_edit, "SHA256SUMS gives bin/kubeadm SHA-256"),
    ("sums-omit", _sums_omit, "SHA256SUMS does not list bin/kubeadm, which manifest.json does"),
    ("manifest-escape", _manifest_escape, "../outside.whl is not a plain path inside the bundle"),
]


def _command(bundle: Path) -> tuple[int, str]:
    """`vslice bundle verify`, which checks the architecture against this machine's."""
    result = run(tool("vslice"), "bundle", "verify", str(bundle))
    return result.returncode, result.stdout + result.stderr


def _role(bundle: Path) -> tuple[int, str]:
    """The role's preflight on this host; the part of the output from the failure on."""
    playbook = bundle.parent / "play.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Bundle",
                    "hosts": "localhost",
                    "connection": "local",
                    "roles": ["vslice_bundle"],
                }
            ]
        )
    )
    result = run(
        tool("ansible-playbook"),
        "--check",
        "--tags",
        "preflight",
        "-e",
        json.dumps({"vslice_bundle": str(bundle)}),
        str(playbook),
        timeout=300,
    )
    output = result.stdout + result.stderr
    return result.returncode, output[output.find("fatal:") :] if "fatal:" in output else output


CHECKERS = {"vslice-bundle-verify": _command, "role": _role}


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_the_bundle_as_sealed_passes(tmp_path: Path, here: dict[str, str], checker: str) -> None:
    status, output = CHECKERS[checker](_seal(tmp_path / "bundle", here))
    assert status == 0, output[-3000:]


@pytest.mark.parametrize("checker", sorted(CHECKERS))
@pytest.mark.parametrize(
    ("tamper", "named"), [case[1:] for case in TAMPERED], ids=[case[0] for case in TAMPERED]
)
def test_a_tampered_bundle_is_refused_naming_the_file_and_the_problem(
    tmp_path: Path,
    here: dict[str, str],
    checker: str,
    tamper: Callable[[Path], None],
    named: str,
) -> None:
    bundle = _seal(tmp_path / "bundle", here)
    tamper(bundle)
    status, output = CHECKERS[checker](bundle)
    assert status != 0, output[-3000:]
    assert f"bundle {bundle} does not match its manifest" in output, output[-3000:]
    assert named in output, output[-3000:]


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_a_bundle_for_another_architecture_is_refused_naming_both(
    tmp_path: Path, here: dict[str, str], checker: str
) -> None:
    arch = here["ansible_architecture"]
    bundle = _seal(tmp_path / "bundle", here, arch=OTHER_ARCH[arch])
    status, output = CHECKERS[checker](bundle)
    assert status != 0, output[-3000:]
    assert f"is {arch}; the bundle is for {OTHER_ARCH[arch]}" in output, output[-3000:]


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_debian_names_of_the_architecture_are_the_same_architecture(
    tmp_path: Path, here: dict[str, str], checker: str
) -> None:
    debian = {"x86_64": "amd64", "aarch64": "arm64"}[here["ansible_architecture"]]
    status, output = CHECKERS[checker](_seal(tmp_path / "bundle", here, arch=debian))
    assert status == 0, output[-3000:]


def test_the_command_and_the_role_run_the_same_checker_file() -> None:
    """vslice_build's checker is a link to the role's file, so there is one check, not two;
    the role runs its own file, never one from the bundle."""
    from vslice_build.bundle import verify_bundle

    assert Path(verify_bundle.__file__).resolve() == CHECKER.resolve()
    assert not CHECKER.is_symlink()
    variables = yaml.safe_load((ROLES / "vslice_bundle" / "vars" / "main.yml").read_text())
    assert variables["_vslice_bundle_checker"] == "{{ role_path }}/files/verify_bundle.py"
    tasks = (ROLES / "vslice_bundle" / "tasks" / "preflight.yml").read_text()
    assert "_vslice_bundle_checker" in tasks and "sha256sum" not in tasks


def test_the_checker_runs_on_python_3_9_with_the_standard_library_only() -> None:
    """Controllers may run an older Python than vslice needs, and have no vslice installed."""
    tree = ast.parse(CHECKER.read_text(), feature_version=(3, 9))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert imported <= {
        "__future__",
        "argparse",
        "hashlib",
        "json",
        "os",
        "re",
        "stat",
        "sys",
        "typing",
    }
    assert os.access(CHECKER, os.X_OK)


def test_the_command_checks_the_architecture_it_is_told_the_hosts_have(
    tmp_path: Path, here: dict[str, str]
) -> None:
    arch = here["ansible_architecture"]
    bundle = _seal(tmp_path / "bundle", here, arch=arch)
    other = OTHER_ARCH[arch]
    refused = run(tool("vslice"), "bundle", "verify", str(bundle), "--arch", other)
    assert refused.returncode != 0
    assert f"--arch {other} is {other}; the bundle is for {arch}" in refused.stderr + refused.stdout
    passed = run(tool("vslice"), "bundle", "verify", str(bundle), "--arch", arch)
    assert passed.returncode == 0, passed.stdout + passed.stderr
