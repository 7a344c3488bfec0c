"""Static checks of the roles: lint, documented and validated variables, preflight messages."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from bringup import HERE, ROLE_NAMES, ROLES, ROOT, VENV_BIN, run, tool
from vslice_build.bundle.manifest import Manifest, Target
from vslice_build.bundle.sums import seal


def _defaults(role: str) -> dict[str, object]:
    data = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    assert isinstance(data, dict)
    return data


def _spec_options(role: str) -> dict[str, dict[str, object]]:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert isinstance(options, dict)
    return options


def test_every_role_has_the_standard_layout() -> None:
    assert ROLE_NAMES == [
        "container_runtime",
        "kubernetes",
        "nvidia_container_toolkit",
        "nvidia_driver",
        "vslice_bundle",
        "vslice_control_plane",
        "vslice_node",
        "vslice_release",
        "vslice_uninstall",
    ]
    for role in ROLE_NAMES:
        for part in (
            "defaults/main.yml",
            "meta/main.yml",
            "meta/argument_specs.yml",
            "tasks/main.yml",
            "tasks/preflight.yml",
            "handlers/main.yml",
            "README.md",
        ):
            assert (ROLES / role / part).is_file(), f"{role} lacks {part}"


def test_ansible_lint_passes_with_the_production_profile() -> None:
    result = run(
        tool("ansible-lint"),
        "-c",
        str(HERE / "ansible-lint.yml"),
        "roles",
        "playbooks",
        "inventory",
        "tests/ansible/molecule",
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "Profile 'production' was required, and it passed" in result.stdout + result.stderr


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_argument_specs_declare_exactly_the_defaults(role: str) -> None:
    defaults = _defaults(role)
    options = _spec_options(role)
    assert sorted(options) == sorted(defaults), "argument_specs.yml and defaults/main.yml differ"
    for name, value in defaults.items():
        assert name.startswith(f"{role}_"), f"{name} lacks the role prefix"
        spec = options[name]
        assert spec.get("description"), f"{name} has no description"
        assert spec.get("default") == value, f"{name}: spec default differs from {value!r}"
        kind = spec["type"]
        expected = {"bool": bool, "int": int, "list": list, "dict": dict}.get(str(kind), str)
        assert isinstance(value, expected), f"{name}: default {value!r} is not a {kind}"
        if "choices" in spec:
            assert value in spec["choices"], f"{name}: default {value!r} not in its choices"


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_readme_documents_every_variable(role: str) -> None:
    readme = (ROLES / role / "README.md").read_text()
    missing = [name for name in _defaults(role) if f"`{name}`" not in readme]
    assert missing == []


def _preflight(tmp_path: Path, role: str, variables: dict[str, object]) -> tuple[int, str]:
    """Run only the role's argument validation and preflight, in check mode, on this host."""
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(
        yaml.safe_dump(
            [{"name": "Preflight", "hosts": "localhost", "connection": "local", "roles": [role]}]
        )
    )
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    result = run(
        tool("ansible-playbook"),
        "--check",
        "--tags",
        "preflight",
        "-e",
        f"@{extra}",
        str(playbook),
        timeout=300,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.fixture
def node_files(tmp_path: Path) -> dict[str, object]:
    wheel = tmp_path / "vslice-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    shim = tmp_path / "libvslice.so"
    shim.write_bytes(b"\x7fELF")
    hook = tmp_path / "hook" / "vslice-memory-limit"  # beside the shim, as make lays it out
    hook.parent.mkdir()
    hook.write_bytes(b"\x7fELF")
    return {"vslice_release_wheel": str(wheel), "vslice_node_shim_file": str(shim)}


GOOD_CONTROL_PLANE: dict[str, object] = {"vslice_control_plane_apply_manifests": False}
# A node's own TLS files, as an operator gives them instead of the control plane's.
OWN_TLS: dict[str, object] = {
    "vslice_node_tls_cert_file": "/etc/vslice/pki/node.crt",
    "vslice_node_tls_key_file": "/etc/vslice/pki/node.key",
    "vslice_node_tls_client_ca_file": "/etc/vslice/pki/ca.crt",
}

# A mirror of NVIDIA's toolkit repository, as a site would give it.
TOOLKIT_REPO = {
    "nvidia_container_toolkit_repo_url": "https://mirror.example/libnvidia-container/stable",
    "nvidia_container_toolkit_repo_key_url": "https://mirror.example/libnvidia-container/gpgkey",
}

BAD_INPUT = [
    ("vslice_node", {"vslice_node_backend": "gpu"}, "vslice_node_backend"),
    ("vslice_node", {"vslice_node_health_timeout": "soon"}, "vslice_node_health_timeout"),
    ("vslice_node", {"vslice_node_monitor_listen": "9401"}, "vslice_node_monitor_listen"),
    ("vslice_node", {"vslice_node_shim_file": ""}, "vslice_node_shim_file"),
    # TLS is on by default: without files, the control plane play must have signed one.
    ("vslice_node", {}, "vslice_node_tls is on (the default) without certificate files"),
    (
        "vslice_node",
        {**OWN_TLS, "vslice_node_tls_key_file": "node.key"},
        "vslice_node_tls_key_file",
    ),
    (
        "vslice_control_plane",
        {**GOOD_CONTROL_PLANE, "vslice_control_plane_node_tls": False},
        "vslice_control_plane_prometheus_node_tls",
    ),
    (
        "vslice_release",
        {"vslice_release_hashes": {"vslice-0.1.0-py3-none-any.whl": "abc"}},
        "vslice_release_hashes",
    ),
    (
        "vslice_node",
        {
            "vslice_node_backend": "static",
            "vslice_node_static_inventory": {"nodes": [{"name": "other", "gpus": []}]},
        },
        "vslice_node_static_inventory",
    ),
    ("vslice_node", {"vslice_release_keep": 0}, "vslice_release_keep"),
    ("vslice_node", {"vslice_release_wheel": "/nowhere/vslice.whl"}, "vslice_release_wheel"),
    (
        "vslice_control_plane",
        {**GOOD_CONTROL_PLANE, "vslice_control_plane_webhook_timeout": 45},
        "vslice_control_plane_webhook_timeout",
    ),
    (
        "vslice_control_plane",
        {**GOOD_CONTROL_PLANE, "vslice_control_plane_tls_extra_sans": ["vslice.lab"]},
        "vslice_control_plane_tls_extra_sans",
    ),
    (
        "vslice_control_plane",
        {**GOOD_CONTROL_PLANE, "vslice_control_plane_tls_renew_days": 365},
        "vslice_control_plane_tls_renew_days",
    ),
    (
        "vslice_control_plane",
        {**GOOD_CONTROL_PLANE, "vslice_control_plane_webhook_failure_policy": "Sometimes"},
        "vslice_control_plane_webhook_failure_policy",
    ),
    (
        "vslice_control_plane",
        {"vslice_control_plane_admin_kubeconfig": "/nowhere/admin.conf"},
        "vslice_control_plane_admin_kubeconfig",
    ),
    ("nvidia_driver", {"nvidia_driver_version": "latest"}, "nvidia_driver_version"),
    ("nvidia_driver", {"nvidia_driver_skip_reboot": "maybe"}, "nvidia_driver_skip_reboot"),
    (
        "nvidia_driver",
        {"nvidia_driver_source": "package_dir", "nvidia_driver_package_dir": "/nowhere"},
        "nvidia_driver_package_dir",
    ),
    ("nvidia_driver", {"nvidia_driver_reboot_timeout": -5}, "nvidia_driver_reboot_timeout"),
    (
        "nvidia_container_toolkit",
        {"nvidia_container_toolkit_source": "ppa"},
        "nvidia_container_toolkit_source",
    ),
    (
        "nvidia_container_toolkit",
        {"nvidia_container_toolkit_version": "latest"},
        "nvidia_container_toolkit_version",
    ),
    # The role names no repository host: with nvidia_repo the site gives NVIDIA's URLs.
    ("nvidia_container_toolkit", {}, "nvidia_container_toolkit_repo_url"),
    (
        "nvidia_driver",
        {"nvidia_driver_source": "distro", "nvidia_driver_debian_mirror": "not a url"},
        "nvidia_driver_debian_mirror",
    ),
    ("nvidia_driver", {"nvidia_driver_source": "cuda_repo"}, "nvidia_driver_cuda_repo_base"),
    ("vslice_uninstall", {"vslice_uninstall_shim_dir": "/usr/local"}, "vslice_uninstall_shim_dir"),
    (
        "vslice_uninstall",
        {"vslice_uninstall_nvidia_runtime": "maybe"},
        "vslice_uninstall_nvidia_runtime",
    ),
    ("vslice_uninstall", {"vslice_uninstall_timeout": 0}, "vslice_uninstall_timeout"),
    ("container_runtime", {"container_runtime_source": "ppa"}, "container_runtime_source"),
    ("container_runtime", {"container_runtime_source": "bundle"}, "vslice_bundle"),
    (
        "container_runtime",
        {"vslice_bundle": "/nowhere/bundle"},
        "debs/Packages.gz",
    ),
    (
        "container_runtime",
        {"container_runtime_source": "distro", "container_runtime_snapshotter": "over lay"},
        "container_runtime_snapshotter",
    ),
    ("kubernetes", {"kubernetes_source": "bundle"}, "vslice_bundle"),
    (
        "kubernetes",
        {"kubernetes_source": "distro", "kubernetes_pod_subnet": "10.244.0.0"},
        "kubernetes_pod_subnet",
    ),
    (
        "kubernetes",
        {"kubernetes_source": "distro", "kubernetes_service_subnet": "10.244.128.0/20"},
        "kubernetes_service_subnet",
    ),
    (
        "kubernetes",
        {"kubernetes_source": "distro", "kubernetes_token_ttl": "forever"},
        "kubernetes_token_ttl",
    ),
]


@pytest.mark.parametrize(
    ("role", "variables", "named"), BAD_INPUT, ids=[f"{c[0]}-{c[2]}" for c in BAD_INPUT]
)
def test_a_bad_variable_fails_before_any_change_with_a_message_naming_it(
    tmp_path: Path,
    node_files: dict[str, object],
    role: str,
    variables: dict[str, object],
    named: str,
) -> None:
    status, output = _preflight(tmp_path, role, {**node_files, **variables})
    assert status != 0, output[-3000:]
    failure = output[output.find("fatal:") :] if "fatal:" in output else output
    assert named in failure, output[-3000:]


@pytest.mark.parametrize(
    ("role", "variables"),
    [
        ("vslice_node", OWN_TLS),
        ("vslice_node", {"vslice_node_tls": False}),
        ("vslice_control_plane", GOOD_CONTROL_PLANE),
        ("nvidia_driver", {}),
        ("nvidia_container_toolkit", TOOLKIT_REPO),
        ("vslice_uninstall", {}),
    ],
)
def test_valid_variables_pass_the_preflight(
    tmp_path: Path, node_files: dict[str, object], role: str, variables: dict[str, object]
) -> None:
    status, output = _preflight(tmp_path, role, {**node_files, **variables})
    assert status == 0, output[-3000:]


def _cluster_preflight(
    tmp_path: Path, groups: dict[str, list[str]], variables: dict[str, object]
) -> tuple[int, str]:
    """The kubernetes role's preflight over an inventory of local hosts in the given groups."""
    hosts = {host for members in groups.values() for host in members}
    inventory = {
        "all": {
            "hosts": {
                host: {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                }
                for host in sorted(hosts)
            },
            "children": {
                group: {"hosts": {host: None for host in members}}
                for group, members in groups.items()
            },
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    playbook = tmp_path / "cluster.yml"
    playbook.write_text(
        yaml.safe_dump([{"name": "Preflight", "hosts": "all", "roles": ["kubernetes"]}])
    )
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({"kubernetes_source": "distro", **variables}))
    result = run(
        tool("ansible-playbook"),
        "--check",
        "--tags",
        "preflight",
        "-i",
        str(tmp_path / "hosts.yml"),
        "-e",
        f"@{extra}",
        str(playbook),
        timeout=300,
    )
    return result.returncode, result.stdout + result.stderr


BAD_CLUSTERS = [
    ({"vslice_control_plane": ["cp"]}, {}, "vslice_gpu_nodes"),
    ({"vslice_gpu_nodes": ["gpu"]}, {}, "vslice_control_plane"),
    (
        {"vslice_control_plane": ["cp"], "vslice_gpu_nodes": ["cp"]},
        {},
        "kubernetes_control_plane_schedulable",
    ),
    (
        {"vslice_control_plane": ["cp", "cp2"], "vslice_gpu_nodes": ["gpu"]},
        {},
        "cp, cp2",
    ),
]


@pytest.mark.parametrize(
    ("groups", "variables", "named"),
    BAD_CLUSTERS,
    ids=["no-gpu-nodes", "no-control-plane", "control-plane-is-gpu-node", "two-control-planes"],
)
def test_a_cluster_inventory_kubeadm_cannot_build_fails_in_preflight(
    tmp_path: Path, groups: dict[str, list[str]], variables: dict[str, object], named: str
) -> None:
    status, output = _cluster_preflight(tmp_path, groups, variables)
    assert status != 0, output[-3000:]
    failure = output[output.find("fatal:") :] if "fatal:" in output else output
    assert named in failure, output[-3000:]


def test_a_schedulable_control_plane_may_be_the_gpu_node(tmp_path: Path) -> None:
    groups = {"vslice_control_plane": ["cp"], "vslice_gpu_nodes": ["cp"]}
    variables = {"kubernetes_control_plane_schedulable": True, "kubernetes_fail_swap_on": False}
    status, output = _cluster_preflight(tmp_path, groups, variables)
    assert status == 0, output[-3000:]


def _sealed_bundle(root: Path, target: Target) -> Path:
    """A small bundle sealed the way `vslice bundle build` seals one."""
    files = {
        "bin/kubeadm": b"kubeadm",
        "shim/libvslice.so": b"\x7fELF",
        "shim/hook/vslice-memory-limit": b"\x7fELF",
        "python/wheel/vslice-0.1.0-py3-none-any.whl": b"PK",
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
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


def _this_host() -> Target:
    """A target naming the system this test runs on, as Ansible's facts will see it."""
    facts = run(
        tool("ansible"),
        "localhost",
        "-m",
        "ansible.builtin.setup",
        "-a",
        "filter=ansible_distribution*,ansible_architecture",
    )
    assert facts.returncode == 0, facts.stdout[-2000:]
    found = json.loads(facts.stdout[facts.stdout.index("{") :])["ansible_facts"]
    return Target(
        "here",
        found["ansible_distribution"],
        str(found["ansible_distribution_major_version"]),
        found["ansible_architecture"],
        "3.11",
        "2.36",
    )


def test_the_bundle_role_checks_the_sums_and_the_hosts_before_anything_changes(
    tmp_path: Path,
) -> None:
    here = _this_host()
    bundle = _sealed_bundle(tmp_path / "bundle", here)
    status, output = _preflight(tmp_path, "vslice_bundle", {"vslice_bundle": str(bundle)})
    assert status == 0, output[-3000:]

    (bundle / "bin" / "kubeadm").write_bytes(b"kubeadX")
    status, output = _preflight(tmp_path, "vslice_bundle", {"vslice_bundle": str(bundle)})
    failure = output[output.find("fatal:") :]
    assert status != 0 and "bin/kubeadm has SHA-256" in failure, output[-3000:]

    other = _sealed_bundle(
        tmp_path / "other", Target("other", "Plan9", "4", here.arch, "3.11", "2.36")
    )
    status, output = _preflight(tmp_path, "vslice_bundle", {"vslice_bundle": str(other)})
    failure = output[output.find("fatal:") :]
    assert status != 0 and "host localhost runs" in failure and "Plan9 4" in failure, output[-3000:]

    status, output = _preflight(tmp_path, "vslice_bundle", {"vslice_bundle": str(tmp_path)})
    failure = output[output.find("fatal:") :]
    assert status != 0 and "holds no manifest.json" in failure, output[-3000:]


def test_the_container_runtime_preflight_accepts_a_complete_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    for name in ("bin/containerd", "bin/containerd-shim-runc-v2", "bin/ctr", "debs/Packages.gz"):
        (bundle / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / name).write_bytes(b"")
    manifest = {
        "components": {"containerd": "v2.4.2"},
        "images": {"pause": {"file": "images/pause.tar", "name": "vslice.local/pause:1"}},
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    status, output = _preflight(tmp_path, "container_runtime", {"vslice_bundle": str(bundle)})
    assert status == 0, output[-3000:]
    status, output = _preflight(
        tmp_path,
        "container_runtime",
        {"vslice_bundle": str(bundle), "container_runtime_images": ["smoke"]},
    )
    assert status != 0 and "container_runtime_images" in output, output[-3000:]


def test_the_playbooks_pass_the_syntax_check_with_the_example_inventory() -> None:
    playbooks = sorted(p.name for p in (ROOT / "playbooks").glob("*.yml"))
    assert {"site.yml", "upgrade.yml", "uninstall.yml"} <= set(playbooks), playbooks
    for playbook in playbooks:
        result = run(
            tool("ansible-playbook"),
            "--syntax-check",
            "-i",
            str(ROOT / "inventory" / "example" / "hosts.yml"),
            str(ROOT / "playbooks" / playbook),
        )
        assert result.returncode == 0, result.stdout + result.stderr


def _issue_certificates(tmp_path: Path, cert_days: int, renew_days: int) -> tuple[str, str]:
    """Run the role's own TLS tasks on this host into tmp_path; the CA's and webhook's serials.

    The tasks file is imported on its own: the whole role (and its dependency that installs
    the vslice release) needs a real control plane, which the molecule scenario provides."""
    role = ROLES / "vslice_control_plane"
    play = {
        "name": "TLS",
        "hosts": "localhost",
        "connection": "local",
        "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml")],
        "tasks": [{"ansible.builtin.import_tasks": str(role / "tasks" / "tls.yml")}],
        "handlers": [{"ansible.builtin.import_tasks": str(role / "handlers" / "main.yml")}],
    }
    playbook = tmp_path / "tls.yml"
    playbook.write_text(yaml.safe_dump([play]))
    (tmp_path / "pki").mkdir(exist_ok=True)
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "vslice_control_plane_tls_dir": str(tmp_path / "pki"),
                "vslice_control_plane_webhook_host": "127.0.0.1",
                "vslice_control_plane_restart_on_change": False,
                "vslice_control_plane_tls_cert_days": cert_days,
                "vslice_control_plane_tls_renew_days": renew_days,
            }
        )
    )
    result = run(tool("ansible-playbook"), "-e", f"@{overrides}", str(playbook), timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    pki = tmp_path / "pki"
    return _serial(pki / "ca.crt"), _serial(pki / "webhook.crt")


def _serial(path: Path) -> str:
    from cryptography import x509

    return format(x509.load_pem_x509_certificate(path.read_bytes()).serial_number, "x")


def test_the_webhook_certificate_is_renewed_only_inside_the_renewal_window(
    tmp_path: Path,
) -> None:
    ca, first = _issue_certificates(tmp_path, cert_days=10, renew_days=5)
    # valid beyond the window: a second run keeps both
    assert _issue_certificates(tmp_path, cert_days=10, renew_days=5) == (ca, first)
    # the same 10-day certificate now falls inside a 30-day window: renewed, the CA kept
    ca_after, renewed = _issue_certificates(tmp_path, cert_days=40, renew_days=30)
    assert (ca_after, renewed != first) == (ca, True)
    # the renewed one lasts 40 days: outside the window again
    assert _issue_certificates(tmp_path, cert_days=40, renew_days=30) == (ca, renewed)


SITE_CONTAINERD = """\
# site setting: keep this comment
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.lab.test/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
"""


def _containerd_step(tmp_path: Path, role: str, tasks: str) -> str:
    """Run one role's containerd tasks file on this host against tmp_path/config.toml."""
    play = {
        "name": "containerd",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Edit the configuration",
                "ansible.builtin.include_role": {"name": role, "tasks_from": tasks},
            }
        ],
    }
    playbook = tmp_path / f"{role}.yml"
    playbook.write_text(yaml.safe_dump([play]))
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "nvidia_container_toolkit_containerd_config": str(tmp_path / "config.toml"),
                "nvidia_container_toolkit_restart_runtimes": False,
                "vslice_uninstall_restart_containerd": False,
            }
        )
    )
    result = run(tool("ansible-playbook"), "-e", f"@{overrides}", str(playbook), timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return output


def test_uninstall_takes_out_exactly_the_runtime_the_toolkit_role_added(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(SITE_CONTAINERD)
    _containerd_step(tmp_path, "nvidia_container_toolkit", "containerd.yml")
    merged = config.read_text()
    assert 'default_runtime_name = "nvidia"' in merged
    assert "containerd.runtimes.nvidia]" in merged
    removed = _containerd_step(tmp_path, "vslice_uninstall", "runtime.yml")
    assert "changed=2" in removed, removed[-3000:]
    assert config.read_text() == SITE_CONTAINERD
    again = _containerd_step(tmp_path, "vslice_uninstall", "runtime.yml")
    assert "changed=0" in again, again[-3000:]
    assert config.read_text() == SITE_CONTAINERD


# As the container_runtime role starts a containerd 2 configuration: a blank line before the CRI
# table, which once ran into the indent of the default runtime line and grew a line every run.
RUNTIME_ROLE_CONTAINERD = """\
version = 3
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.cri.v1.runtime".containerd]
"""


def test_the_toolkit_role_sets_the_default_runtime_once_in_a_containerd_2_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(RUNTIME_ROLE_CONTAINERD)
    _containerd_step(tmp_path, "nvidia_container_toolkit", "containerd.yml")
    merged = config.read_text()
    assert merged.startswith(
        RUNTIME_ROLE_CONTAINERD + '  default_runtime_name = "nvidia"\n# BEGIN nvidia runtime'
    ), merged
    assert "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]" in merged
    again = _containerd_step(tmp_path, "nvidia_container_toolkit", "containerd.yml")
    assert "changed=0" in again, again[-3000:]
    assert config.read_text() == merged


def _release_prefix(tmp_path: Path) -> Path:
    """A release prefix whose ``current`` is this checkout's virtualenv: the role runs the
    ``vslice`` command installed there, as it runs the release's on a host."""
    prefix = tmp_path / "release"
    if not prefix.exists():
        (prefix / "current").mkdir(parents=True)
        (prefix / "current" / "bin").symlink_to(VENV_BIN)
    return prefix


# What the TLS tasks register, for the tasks that render from it.
CA_BUNDLE = "Q0EtUEVN"
SCHEDULER_CLIENT = ["Q0VSVA==", "S0VZ", "Q0E="]


def _render_with_the_role(
    tmp_path: Path, variables: dict[str, object], *, check: bool = False
) -> tuple[Path, str]:
    """Run the role's own rendering tasks (tasks/manifests.yml and tasks/scheduler.yml) on
    this host into tmp_path; the manifests directory and the play's output."""
    role = ROLES / "vslice_control_plane"
    play = {
        "name": "Render",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml")],
        "tasks": [
            {"ansible.builtin.import_tasks": str(role / "tasks" / "manifests.yml")},
            {"ansible.builtin.import_tasks": str(role / "tasks" / "scheduler.yml")},
        ],
    }
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([play]))
    config = tmp_path / "etc"
    (config / "manifests").mkdir(parents=True, exist_ok=True)
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "vslice_release_prefix": str(_release_prefix(tmp_path)),
                "vslice_control_plane_config_dir": str(config),
                "vslice_control_plane_scheduler_config_file": str(config / "scheduler.yaml"),
                "vslice_control_plane_kubeadm": "never",
                "vslice_control_plane_webhook_host": "192.0.2.10",
                "__vslice_control_plane_ca_bundle": {"content": CA_BUNDLE},
                "__vslice_control_plane_scheduler_client": {
                    "results": [{"content": content} for content in SCHEDULER_CLIENT]
                },
                **variables,
            }
        )
    )
    result = run(
        tool("ansible-playbook"),
        *(["--check"] if check else []),
        "-e",
        f"@{overrides}",
        str(playbook),
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return config, output


def _documents(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


RENAMED: dict[str, object] = {
    "vslice_control_plane_namespace": "gpu-ops",
    "vslice_control_plane_webhook_host": "fd00::1",
    "vslice_control_plane_webhook_listen": "[::]:9443",
    "vslice_control_plane_webhook_path": "/admit",
    "vslice_control_plane_webhook_failure_policy": "Ignore",
    "vslice_control_plane_webhook_timeout": 5,
    "vslice_control_plane_webhook_excluded_namespaces": ["kube-system", "gpu-ops", "monitoring"],
    "vslice_control_plane_gpu_namespaces": ["team-a", "team-b"],
    "vslice_control_plane_pod_security_level": "restricted",
    "vslice_control_plane_scheduler_name": "sched-x",
    "vslice_control_plane_scheduler_settings": {"lease_name": "my-lease"},
    "vslice_control_plane_resource_gpu": "example.com/gpu",
    "vslice_control_plane_resource_memory": "example.com/vram",
    "vslice_control_plane_resource_memory_percentage": "example.com/vram-percent",
    "vslice_control_plane_resource_cores": "example.com/sm",
    "vslice_control_plane_extender_tls": False,
    "vslice_control_plane_scheduler_listen": "0.0.0.0:9999",
    "vslice_control_plane_extender_http_timeout": "5s",
    "vslice_control_plane_scheduler_kubeconfig": "/etc/k/scheduler.conf",
}
# The same choices as the install values they stand for (vslice_control.install.values).
RENAMED_VALUES: dict[str, object] = {
    "namespace": "gpu-ops",
    "resources": {
        "gpu": "example.com/gpu",
        "memory": "example.com/vram",
        "memory_percent": "example.com/vram-percent",
        "cores": "example.com/sm",
    },
    "scheduler_name": "sched-x",
    "lease_name": "my-lease",
    "webhook": {
        "url": "https://[fd00::1]:9443/admit",
        "ca_bundle": CA_BUNDLE,
        "failure_policy": "Ignore",
        "timeout_seconds": 5,
        "excluded_namespaces": ["kube-system", "gpu-ops", "monitoring"],
    },
    "gpu_namespaces": ["team-a", "team-b"],
    "pod_security_level": "restricted",
    "kube_scheduler": {
        "kubeconfig": "/etc/k/scheduler.conf",
        "extender_url": "http://127.0.0.1:9999",
        "extender_http_timeout": "5s",
    },
}
DEFAULT_VALUES: dict[str, object] = {
    "webhook": {"url": "https://192.0.2.10:8443/mutate", "ca_bundle": CA_BUNDLE},
    "kube_scheduler": {
        "extender_url": "https://127.0.0.1:8888",
        "extender_tls": dict(
            zip(("cert_data", "key_data", "ca_data"), SCHEDULER_CLIENT, strict=True)
        ),
    },
}


MONITORING: dict[str, object] = {
    "vslice_control_plane_prometheus_operator": True,
    "vslice_control_plane_prometheus_operator_labels": {"release": "kube-prometheus"},
    "vslice_control_plane_grafana_dashboard": True,
}
MONITORING_VALUES: dict[str, object] = {
    **DEFAULT_VALUES,
    "prometheus": {
        "node_tls": True,
        "cert_file": "/etc/vslice/prometheus/prometheus-client.crt",
        "key_file": "/etc/vslice/prometheus/prometheus-client.key",
        "operator": True,
        "operator_labels": {"release": "kube-prometheus"},
        "grafana_dashboard": True,
        "targets": {"scheduler": ["127.0.0.1:8888"], "webhook": ["127.0.0.1:8443"]},
    },
}


KUEUE: dict[str, object] = {
    "vslice_control_plane_kueue": True,
    "vslice_control_plane_kueue_teams": [
        {"name": "team-a", "memory": "80Gi"},
        {"name": "vision", "namespace": "cv-lab", "gpus": 2, "cpu": "16"},
    ],
    "vslice_control_plane_kueue_cohort": "lab",
}
KUEUE_VALUES: dict[str, object] = {
    **DEFAULT_VALUES,
    "kueue": {
        "queues": True,
        "teams": [
            {"name": "team-a", "memory": "80Gi"},
            {"name": "vision", "namespace": "cv-lab", "gpus": 2, "cpu": "16"},
        ],
        "cohort": "lab",
    },
}


@pytest.mark.parametrize(
    ("variables", "values"),
    [
        ({}, DEFAULT_VALUES),
        (RENAMED, RENAMED_VALUES),
        (MONITORING, MONITORING_VALUES),
        (KUEUE, KUEUE_VALUES),
    ],
    ids=["defaults", "renamed", "monitoring", "kueue"],
)
def test_the_roles_files_are_what_vslice_manifests_renders_from_its_variables(
    tmp_path: Path, variables: dict[str, object], values: dict[str, object]
) -> None:
    """The role writes what the one source (vslice_control.install) builds from the values
    its variables stand for: a variable the role forgot to pass, or passed wrong, shows."""
    from vslice_control.install.manifests import API_PARTS, objects
    from vslice_control.install.values import parse_values

    config, _ = _render_with_the_role(tmp_path, variables)
    expected = parse_values(values)
    optional = {
        "device-class": False,
        "gpu-namespaces": bool(expected.gpu_namespaces),
        "prometheus-operator": expected.prometheus.operator,
        "grafana-dashboard": expected.prometheus.grafana_dashboard,
        "kueue-queues": expected.kueue.queues,
    }
    parts = [part for part in API_PARTS if optional.get(part, True)]
    assert sorted(p.stem for p in (config / "manifests").iterdir()) == sorted(parts)
    for part in parts:
        assert _documents(config / "manifests" / f"{part}.yaml") == objects(expected, [part]), part
    scheduler = _documents(config / "scheduler.yaml")
    assert scheduler == objects(expected, ["kube-scheduler-config"])
    assert (config / "scheduler.yaml").stat().st_mode & 0o777 == 0o600


def test_the_prometheus_files_are_what_vslice_manifests_renders(tmp_path: Path) -> None:
    """tasks/prometheus.yml writes the scrape jobs and rules of the one source, with this host's
    extender and webhook and every GPU node's agent and monitor as targets, and the CA."""
    from vslice_control.install.manifests import objects
    from vslice_control.install.values import parse_values

    role = ROLES / "vslice_control_plane"
    tls, prom = tmp_path / "tls", tmp_path / "prometheus"
    tls.mkdir()
    (tls / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nlab\n-----END CERTIFICATE-----\n")
    client = {"crt": "client certificate\n", "key": "client key\n"}
    for ext, text in client.items():
        (tls / f"prometheus-client.{ext}").write_text(text)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "vslice_control_plane": {"hosts": {"cp1": {"ansible_connection": "local"}}},
                        "vslice_gpu_nodes": {"hosts": {"gpu1": None, "gpu2": None}},
                    }
                }
            }
        )
    )
    play = {
        "name": "Render",
        "hosts": "cp1",
        "gather_facts": False,
        "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml")],
        "tasks": [{"ansible.builtin.import_tasks": str(role / "tasks" / "prometheus.yml")}],
    }
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([play]))
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "vslice_release_prefix": str(_release_prefix(tmp_path)),
                "vslice_control_plane_tls_dir": str(tls),
                "vslice_control_plane_prometheus_dir": str(prom),
                "vslice_control_plane_prometheus_scrape_interval": "15s",
                "vslice_control_plane_scheduler_listen": "0.0.0.0:8888",
                "__vslice_control_plane_ca_bundle": {"content": CA_BUNDLE},
            }
        )
    )
    result = run(
        tool("ansible-playbook"),
        "-i",
        str(inventory),
        "-e",
        f"@{overrides}",
        str(playbook),
        timeout=300,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    expected = parse_values(
        {
            "prometheus": {
                "scrape_interval": "15s",
                "ca_file": f"{prom}/ca.crt",
                "node_tls": True,
                "cert_file": f"{prom}/prometheus-client.crt",
                "key_file": f"{prom}/prometheus-client.key",
                "targets": {
                    "scheduler": ["cp1:8888"],
                    "webhook": ["cp1:8443"],
                    "node_agent": ["gpu1:9400", "gpu2:9400"],
                    "monitor": ["gpu1:9401", "gpu2:9401"],
                },
            }
        }
    )
    for part in ("prometheus-scrape", "prometheus-rules"):
        assert _documents(prom / f"{part}.yaml") == objects(expected, [part]), part
    assert (prom / "ca.crt").read_text() == (tls / "ca.crt").read_text()
    # The nodes' jobs present the vslice-prometheus client certificate the role signed.
    for ext, text in client.items():
        assert (prom / f"prometheus-client.{ext}").read_text() == text
    assert (prom / "prometheus-client.key").stat().st_mode & 0o777 == 0o600


def test_a_second_run_changes_nothing_and_check_mode_writes_nothing(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.mkdir()
    _render_with_the_role(first, {})
    _, again = _render_with_the_role(first, {})
    assert "changed=0" in again, again[-3000:]
    checked = tmp_path / "checked"
    checked.mkdir()
    config, output = _render_with_the_role(checked, {}, check=True)
    assert "failed=0" in output
    assert list((config / "manifests").iterdir()) == []
    assert not (config / "scheduler.yaml").exists()


def test_the_installed_objects_hold_what_the_security_model_needs() -> None:
    """The webhook is called for every managed resource, nobody opts a pod out with a label,
    only vslice's accounts (and named groups) write its pod state, and users get a read-only
    viewer role."""
    from vslice_control.install.manifests import objects
    from vslice_control.install.rbac import VIEWER_ROLE
    from vslice_control.install.values import parse_values

    values = parse_values(RENAMED_VALUES)
    by_kind = {doc["kind"]: doc for doc in objects(values)}
    (hook,) = by_kind["MutatingWebhookConfiguration"]["webhooks"]
    assert "objectSelector" not in hook
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": "vslice.io/webhook", "operator": "NotIn", "values": ["disabled"]} in expressions
    assert expressions[0]["values"] == ["gpu-ops", "kube-system", "monitoring"]
    (condition,) = hook["matchConditions"]
    for resource in values.resources.managed():
        assert f"'{resource}'" in condition["expression"]
    assert "nvidia.com" not in condition["expression"]
    from vslice_control.install import statepolicy

    (policy,) = [
        doc
        for doc in objects(values)
        if doc["kind"] == "ValidatingAdmissionPolicy"
        and doc["metadata"]["name"] == statepolicy.POLICY_NAME
    ]
    (exempt,) = policy["spec"]["matchConditions"]
    assert exempt["expression"].startswith(
        "!(request.userInfo.username in ['system:serviceaccount:gpu-ops:vslice-control-plane', "
        "'system:serviceaccount:gpu-ops:vslice-node'])"
    )
    viewers = [
        doc
        for doc in objects(values, ["rbac"])
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == VIEWER_ROLE
    ]
    (viewer,) = viewers
    verbs = {verb for rule in viewer["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    assert "aggregationRule" not in viewer and "labels" in viewer["metadata"]
    assert not any(
        key.startswith("rbac.authorization.k8s.io/aggregate")
        for key in viewer["metadata"]["labels"]
    )
    namespaces = [doc for doc in objects(values, ["gpu-namespaces"])]
    assert [doc["metadata"]["name"] for doc in namespaces] == ["team-a", "team-b"]
    for doc in namespaces:
        assert doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_api_server_gets_a_webhook_client_certificate_and_admission_configuration(
    tmp_path: Path,
) -> None:
    """The role's TLS tasks and its webhook client tasks, run on this host into tmp_path."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    role = ROLES / "vslice_control_plane"
    play = {
        "name": "Webhook client",
        "hosts": "localhost",
        "connection": "local",
        "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml")],
        "tasks": [
            {"ansible.builtin.import_tasks": str(role / "tasks" / "tls.yml")},
            {"ansible.builtin.import_tasks": str(role / "tasks" / "webhook_client_tls.yml")},
        ],
        "handlers": [{"ansible.builtin.import_tasks": str(role / "handlers" / "main.yml")}],
    }
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play]))
    (tmp_path / "pki").mkdir()
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "vslice_release_prefix": str(_release_prefix(tmp_path)),
                "vslice_control_plane_tls_dir": str(tmp_path / "pki"),
                "vslice_control_plane_admission_config_dir": str(tmp_path / "admission"),
                "vslice_control_plane_webhook_host": "10.0.0.5",
                "vslice_control_plane_restart_on_change": False,
            }
        )
    )
    result = run(tool("ansible-playbook"), "-e", f"@{overrides}", str(tmp_path / "play.yml"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    config = yaml.safe_load((tmp_path / "admission" / "admission.yaml").read_text())
    kubeconfig = tmp_path / "admission" / "admission-webhooks.kubeconfig"
    assert [p["name"] for p in config["plugins"]] == [
        "MutatingAdmissionWebhook",
        "ValidatingAdmissionWebhook",
    ]
    for plugin in config["plugins"]:
        assert plugin["configuration"]["kind"] == "WebhookAdmissionConfiguration"
        assert plugin["configuration"]["kubeConfigFile"] == str(kubeconfig)
    (user,) = yaml.safe_load(kubeconfig.read_text())["users"]
    assert user["name"] == "10.0.0.5:8443"  # the webhook URL's host:port
    key = base64.b64decode(user["user"]["client-key-data"])
    assert key == (tmp_path / "pki" / "webhook-client.key").read_bytes()
    cert = x509.load_pem_x509_certificate((tmp_path / "pki" / "webhook-client.crt").read_bytes())
    (cn,) = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert cn.value == "kube-apiserver-webhook-client"
    assert kubeconfig.stat().st_mode & 0o777 == 0o600


def test_the_services_get_the_resource_names_the_webhook_is_called_for() -> None:
    """kube-scheduler, the webhook's matchConditions and the services' own settings name the
    same resources, so a renamed resource reaches all three."""
    variables = yaml.safe_load((ROLES / "vslice_control_plane" / "vars" / "main.yml").read_text())
    resources = variables["_vslice_control_plane_common_settings"]["resources"]
    assert resources == {
        "gpu": "{{ vslice_control_plane_resource_gpu }}",
        "memory": "{{ vslice_control_plane_resource_memory }}",
        "memory_percent": "{{ vslice_control_plane_resource_memory_percentage }}",
        "cores": "{{ vslice_control_plane_resource_cores }}",
    }


def test_uninstall_deletes_every_cluster_wide_object_the_role_installs() -> None:
    """vslice_uninstall names the objects it deletes; they are the names the one source gives
    (the GPU namespaces are the site's, and stay)."""
    from vslice_control.install.manifests import objects
    from vslice_control.install.values import parse_values

    installed = objects(parse_values({"webhook": {"url": "https://x:8443/mutate"}}))
    names = {(doc["kind"], doc["metadata"]["name"]) for doc in installed}
    variables = yaml.safe_load((ROLES / "vslice_uninstall" / "vars" / "main.yml").read_text())
    accounts = variables["_vslice_uninstall_accounts"]
    deleted = {
        ("MutatingWebhookConfiguration", variables["_vslice_uninstall_webhook_configuration"]),
        (
            "ValidatingWebhookConfiguration",
            variables["_vslice_uninstall_claims_webhook_configuration"],
        ),
        ("ValidatingAdmissionPolicy", variables["_vslice_uninstall_state_policy"]),
        ("ValidatingAdmissionPolicyBinding", variables["_vslice_uninstall_state_policy"]),
        ("ValidatingAdmissionPolicy", variables["_vslice_uninstall_idle_policy"]),
        ("ValidatingAdmissionPolicyBinding", variables["_vslice_uninstall_idle_policy"]),
        ("ValidatingAdmissionPolicy", variables["_vslice_uninstall_claim_policy"]),
        ("ValidatingAdmissionPolicyBinding", variables["_vslice_uninstall_claim_policy"]),
        ("ClusterRole", variables["_vslice_uninstall_viewer_role"]),
        ("Namespace", "vslice-system"),  # vslice_uninstall_namespace
        *((kind, name) for kind in ("ClusterRole", "ClusterRoleBinding") for name in accounts),
        *(
            (item["kind"], item["name"])
            for item in variables["_vslice_uninstall_namespaced_objects"]
        ),
    }
    assert names == deleted
    tasks = yaml.safe_load((ROLES / "vslice_uninstall" / "tasks" / "objects.yml").read_text())
    loops = " ".join(str(task.get("loop", "")) for task in tasks)
    assert "_vslice_uninstall_viewer_role" in loops


def test_the_preflight_stops_when_kube_apiserver_would_not_present_the_webhooks_client_certificate(
    tmp_path: Path, node_files: dict[str, object]
) -> None:
    """Client authentication is on by default; with the webhook registered by the role, a
    kube-apiserver without the admission flag would have every GPU pod refused."""
    admin = tmp_path / "admin.conf"
    admin.write_text("apiVersion: v1\nkind: Config\n")
    manifest = tmp_path / "kube-apiserver.yaml"
    manifest.write_text("spec:\n  containers:\n  - command: [kube-apiserver, --secure-port=6443]\n")
    variables = {
        **node_files,
        "vslice_control_plane_admin_kubeconfig": str(admin),
        "vslice_control_plane_apiserver_manifest": str(manifest),
    }
    status, output = _preflight(tmp_path, "vslice_control_plane", variables)
    assert status != 0, output[-3000:]
    failure = output[output.find("fatal:") :]
    assert "vslice_control_plane_apiserver_manifest" in failure, failure[-3000:]
    assert "--admission-control-config-file=/etc/kubernetes/vslice/admission.yaml" in failure
    assert "vslice_control_plane_apiserver_admission_confirmed" in failure

    manifest.write_text(
        "spec:\n  containers:\n  - command: [kube-apiserver,"
        " --admission-control-config-file=/etc/kubernetes/vslice/admission.yaml]\n"
    )
    status, output = _preflight(tmp_path, "vslice_control_plane", variables)
    assert status == 0, output[-3000:]
    manifest.unlink()
    confirmed = {**variables, "vslice_control_plane_apiserver_admission_confirmed": True}
    status, output = _preflight(tmp_path, "vslice_control_plane", confirmed)
    assert status == 0, output[-3000:]


def test_kube_apiserver_is_restarted_only_when_its_webhook_credentials_change(
    tmp_path: Path,
) -> None:
    """kube-apiserver reads the webhook kubeconfig once, at start: new credentials annotate its
    static pod manifest (the kubelet recreates the pod); the same credentials leave it alone."""
    role = ROLES / "vslice_control_plane"
    play = {
        "name": "Webhook client",
        "hosts": "localhost",
        "connection": "local",
        "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml")],
        "tasks": [
            {"ansible.builtin.import_tasks": str(role / "tasks" / "tls.yml")},
            {"ansible.builtin.import_tasks": str(role / "tasks" / "webhook_client_tls.yml")},
        ],
        "handlers": [{"ansible.builtin.import_tasks": str(role / "handlers" / "main.yml")}],
    }
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play]))
    (tmp_path / "pki").mkdir()
    manifest = tmp_path / "kube-apiserver.yaml"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-apiserver", "namespace": "kube-system"},
        "spec": {"containers": [{"name": "kube-apiserver", "command": ["kube-apiserver"]}]},
    }
    manifest.write_text(yaml.safe_dump(pod))
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "vslice_release_prefix": str(_release_prefix(tmp_path)),
                "vslice_control_plane_tls_dir": str(tmp_path / "pki"),
                "vslice_control_plane_admission_config_dir": str(tmp_path / "admission"),
                "vslice_control_plane_apiserver_manifest": str(manifest),
                "vslice_control_plane_apply_manifests": False,
                "vslice_control_plane_webhook_host": "10.0.0.5",
                "vslice_control_plane_restart_on_change": False,
            }
        )
    )
    result = run(tool("ansible-playbook"), "-e", f"@{overrides}", str(tmp_path / "play.yml"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    restarted = yaml.safe_load(manifest.read_text())
    annotation = restarted["metadata"]["annotations"]["vslice.io/admission-credentials-sha256"]
    assert len(annotation) == 64
    assert restarted["spec"] == pod["spec"]
    before = manifest.read_text()
    again = run(tool("ansible-playbook"), "-e", f"@{overrides}", str(tmp_path / "play.yml"))
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert manifest.read_text() == before


def _render_kubernetes_templates(tmp_path: Path, variables: dict[str, object]) -> Path:
    """The kubernetes role's kubeadm configuration, rendered by Ansible into
    tmp_path with the role's defaults and the facts init.yml works out."""
    role = ROLES / "kubernetes"
    play = {
        "name": "Render",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(role / "defaults" / "main.yml")],
        "tasks": [
            {
                "name": f"Render {name}",
                "ansible.builtin.template": {
                    "src": str(role / "templates" / name),
                    "dest": str(tmp_path / name.removesuffix(".j2")),
                    "mode": "0600",
                },
            }
            for name in ("kubeadm-config.yaml.j2",)
        ],
    }
    (tmp_path / "render.yml").write_text(yaml.safe_dump([play]))
    overrides = tmp_path / "render-vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "__kubernetes_address": "10.0.0.5",
                "__kubernetes_node": "cp-1",
                "_kubernetes_cri_socket": "unix:///run/containerd/containerd.sock",
                "__kubernetes_version": "v1.36.0",
                "_kubernetes_endpoint": "10.0.0.5:6443",
                "__kubernetes_image_repository": "",
                "__kubernetes_etcd_tag": "",
                "_kubernetes_systemd_cgroup": True,
                "__kubernetes_any_cgroup_v1": False,
                **variables,
            }
        )
    )
    result = run(tool("ansible-playbook"), "-e", f"@{overrides}", str(tmp_path / "render.yml"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return tmp_path


def test_a_cluster_vslice_builds_runs_kube_apiserver_with_the_admission_config_vslice_renders(
    tmp_path: Path,
) -> None:
    rendered = _render_kubernetes_templates(
        tmp_path, {"kubernetes_webhook_admission_dir": "/etc/k8s/admission"}
    )
    # Until vslice_control_plane writes vslice's own file (from `vslice manifests`, the one
    # source) into the same directory, kube-apiserver starts on a placeholder.
    init = yaml.safe_load((ROLES / "kubernetes" / "tasks" / "init.yml").read_text())
    (placeholder,) = [
        task["ansible.builtin.copy"]
        for task in init
        if str((task.get("ansible.builtin.copy") or {}).get("dest", "")).endswith("admission.yaml")
    ]
    assert yaml.safe_load(placeholder["content"]) == {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [],
    }
    assert placeholder["force"] is False
    kubernetes = yaml.safe_load((ROLES / "kubernetes" / "defaults" / "main.yml").read_text())
    control = yaml.safe_load((ROLES / "vslice_control_plane" / "defaults" / "main.yml").read_text())
    assert (
        kubernetes["kubernetes_webhook_admission_dir"]
        == control["vslice_control_plane_admission_config_dir"]
    )
    cluster = _documents(rendered / "kubeadm-config.yaml")[1]
    assert cluster["kind"] == "ClusterConfiguration"
    assert cluster["apiServer"]["extraArgs"] == [
        {"name": "admission-control-config-file", "value": "/etc/k8s/admission/admission.yaml"}
    ]
    (volume,) = cluster["apiServer"]["extraVolumes"]
    assert volume["hostPath"] == volume["mountPath"] == "/etc/k8s/admission"
    assert volume["readOnly"] is True
