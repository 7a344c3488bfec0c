"""The offline bundle: its manifest, checksums and host checks (pure), and sealing and verifying
a small bundle on disk. The whole bundle is built once by tests/ansible (the cluster scenario)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from vslice_build.bundle import debs, manifest
from vslice_build.bundle.build import platform_tags, source_root
from vslice_build.bundle.manifest import BundleError, FileEntry, Host, ImageEntry, Manifest
from vslice_build.bundle.sums import seal
from vslice_build.bundle.verify import verify

DEBIAN12 = manifest.TARGETS["debian12"]


def _manifest(**changes: object) -> Manifest:
    base = Manifest(
        vslice_version="0.1.0",
        target=DEBIAN12,
        components={"kubernetes": "v1.36.3", "containerd": "2.4.2"},
        images={"pause": ImageEntry("images/pause.tar", "vslice.local/pause:1")},
        wheel="python/wheel/vslice-0.1.0-py3-none-any.whl",
        wheelhouse="python/wheelhouse",
        shim="shim/libvslice.so",
    )
    return Manifest(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def _write_bundle(root: Path) -> Manifest:
    for path, data in {
        "images/pause.tar": b"pause",
        "python/wheel/vslice-0.1.0-py3-none-any.whl": b"wheel",
        "python/wheelhouse/PyYAML-6.0-cp311.whl": b"yaml",
        "shim/libvslice.so": b"\x7fELF GLIBC_2.2.5 GLIBC_2.34",
        "bin/kubeadm": b"kubeadm",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return seal(root, _manifest())


def test_a_manifest_survives_its_json_round_trip() -> None:
    written = _manifest(files={"bin/kubeadm": FileEntry("a" * 64, 7)})
    assert manifest.parse(json.loads(json.dumps(written.to_json()))) == written


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d.update(format=2), "format"),
        (lambda d: d["target"].pop("arch"), "target.arch"),
        (lambda d: d["images"]["pause"].update(file="../../etc/passwd"), "images.pause.file"),
        (lambda d: d["images"]["pause"].update(file="/etc/passwd"), "images.pause.file"),
        (lambda d: d["python"].update(wheel=3), "python.wheel"),
        (lambda d: d["files"].update({"bin/x": {"sha256": "zz", "size": 1}}), "files.bin/x"),
        (lambda d: d["files"].update({"bin/x": {"sha256": "a" * 64, "size": True}}), "size"),
        (lambda d: d["components"].update(kubernetes=136), "components.kubernetes"),
    ],
    ids=[
        "format",
        "target",
        "escape",
        "absolute",
        "wheel-type",
        "checksum",
        "bool-size",
        "version",
    ],
)
def test_a_malformed_manifest_is_refused_naming_the_field(edit: object, named: str) -> None:
    data = _manifest(files={"bin/kubeadm": FileEntry("a" * 64, 7)}).to_json()
    edit(data)  # type: ignore[operator]
    with pytest.raises(BundleError) as caught:
        manifest.parse(data)
    assert named in str(caught.value)


def test_a_host_of_another_system_or_architecture_is_named_with_both() -> None:
    assert manifest.host_problem(DEBIAN12, Host("gpu-1", "Debian", "12", "x86_64")) is None
    assert manifest.host_problem(DEBIAN12, Host("gpu-1", "Debian", "12.7", "x86_64")) is None
    ubuntu = manifest.host_problem(DEBIAN12, Host("gpu-2", "Ubuntu", "22.04", "x86_64"))
    assert ubuntu is not None and "gpu-2 runs Ubuntu 22.04" in ubuntu and "Debian 12" in ubuntu
    arm = manifest.host_problem(DEBIAN12, Host("gpu-3", "Debian", "12", "aarch64"))
    assert arm is not None and "gpu-3 is aarch64" in arm


def test_an_unknown_target_lists_the_known_ones() -> None:
    with pytest.raises(
        BundleError, match="'ubuntu24' is not a bundle target; the targets are: debian12"
    ):
        manifest.target("ubuntu24")


def test_the_newest_glibc_symbol_version_is_the_one_a_library_needs() -> None:
    assert manifest.glibc_needed(b"..GLIBC_2.2.5\0GLIBC_2.34\0GLIBC_2.17\0") == (2, 34)
    assert manifest.glibc_needed(b"no versions") is None
    shim = source_root() / "shim" / "build" / "libvslice.so"
    needed = manifest.glibc_needed(shim.read_bytes())
    assert needed is not None and (2, 2) <= needed <= (2, 36)


def test_wheels_are_fetched_for_every_manylinux_tag_the_target_glibc_loads() -> None:
    tags = platform_tags(DEBIAN12)
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert "manylinux_2_37_x86_64" not in tags and tags[-2:] == [
        "manylinux2014_x86_64",
        "linux_x86_64",
    ]


def test_only_a_host_of_the_target_release_fetches_its_packages() -> None:
    bookworm = {"NAME": "Debian GNU/Linux", "VERSION_ID": "12"}
    assert debs.build_host_problem(DEBIAN12, bookworm, "amd64") is None
    trixie = debs.build_host_problem(
        DEBIAN12, {"NAME": "Debian GNU/Linux", "VERSION_ID": "13"}, "amd64"
    )
    assert trixie is not None and "Debian GNU/Linux 13" in trixie
    assert "arm64" in (debs.build_host_problem(DEBIAN12, bookworm, "arm64") or "")
    release = debs.read_os_release('NAME="Debian GNU/Linux"\nVERSION_ID="12"\n# comment\n')
    assert release == bookworm


def test_apt_output_is_read_into_names_and_stanzas() -> None:
    depends = (
        "runc\n  Depends: libc6\n  Depends: <libseccomp>\nlibc6\n  Depends: libgcc-s1\n<virtual>\n"
    )
    assert debs.closure_names(depends) == ["libc6", "runc"]
    show = "Package: a\nVersion: 1\nDescription: x\n more\n\nPackage: b\nEssential: yes\n"
    assert debs.stanzas(show) == [
        {"Package": "a", "Version": "1", "Description": "x\n more"},
        {"Package": "b", "Essential": "yes"},
    ]
    entry = debs.index_stanza("Package: a\nVersion: 1\n", "a_1_amd64.deb", b"data")
    assert entry.startswith("Package: a\nVersion: 1\nFilename: ./a_1_amd64.deb\nSize: 4\n")
    assert "SHA256: 3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7" in entry


def test_a_sealed_bundle_verifies_and_any_change_is_named(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    sealed = _write_bundle(root)
    assert set(sealed.files) == {
        "images/pause.tar",
        "python/wheel/vslice-0.1.0-py3-none-any.whl",
        "python/wheelhouse/PyYAML-6.0-cp311.whl",
        "shim/libvslice.so",
        "bin/kubeadm",
    }
    assert verify(root) == sealed
    # The sums file is what a controller without vslice checks: sha256sum accepts it.
    checked = subprocess.run(
        ["sha256sum", "--quiet", "--strict", "-c", "SHA256SUMS"], cwd=root, check=False
    )
    assert checked.returncode == 0

    (root / "bin" / "kubeadm").write_bytes(b"kubeadX")
    with pytest.raises(BundleError, match=r"bin/kubeadm has SHA-256 .*the manifest says"):
        verify(root)
    failed = subprocess.run(
        ["sha256sum", "--quiet", "-c", "SHA256SUMS"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert failed.returncode != 0 and "bin/kubeadm: FAILED" in failed.stdout


def test_an_edited_manifest_no_longer_matches_the_sums(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    _write_bundle(root)
    data = json.loads((root / "manifest.json").read_text())
    data["images"]["pause"]["name"] = "evil.example/pause:1"
    (root / "manifest.json").write_text(json.dumps(data, indent=1) + "\n")
    with pytest.raises(BundleError, match=r"SHA256SUMS does not match manifest\.json"):
        verify(root)


def test_not_a_bundle_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"cannot be read"):
        verify(tmp_path)
    with pytest.raises(BundleError, match="not a directory"):
        verify(tmp_path / "nowhere.tar")
