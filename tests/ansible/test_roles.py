"""Static checks of the roles: lint, documented and validated variables, preflight messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from bringup import HERE, ROLE_NAMES, ROLES, ROOT, run, tool
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
    return {"vslice_release_wheel": str(wheel), "vslice_node_shim_file": str(shim)}


GOOD_CONTROL_PLANE: dict[str, object] = {"vslice_control_plane_apply_manifests": False}

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
        ("vslice_node", {}),
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
    for name, data in {"bin/kubeadm": b"kubeadm", "shim/libvslice.so": b"\x7fELF"}.items():
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
    assert status != 0 and "bin/kubeadm: FAILED" in failure, output[-3000:]

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


def _render_control_plane_template(name: str, **variables: object) -> list[dict[str, object]]:
    """A template of the control plane role rendered with its defaults (plain Jinja2 with the
    Ansible filters these templates use)."""
    import jinja2

    role = ROLES / "vslice_control_plane"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters["to_json"] = json.dumps
    environment.filters["unique"] = lambda items: list(dict.fromkeys(items))  # Ansible's: a list
    template = environment.from_string((role / "templates" / name).read_text())
    text = template.render({**defaults, "ansible_managed": "test", **variables})
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_the_roles_state_policy_is_the_one_the_lab_installs() -> None:
    from vslice_control.webhook.statepolicy import state_policy

    rendered = _render_control_plane_template("state-policy.yaml.j2")
    accounts = [
        f"system:serviceaccount:vslice-system:{a}" for a in ("vslice-control-plane", "vslice-node")
    ]
    assert rendered == list(
        state_policy(users=accounts, excluded_namespaces=["vslice-system", "kube-system"])
    )


def test_the_gpu_namespaces_get_the_pod_security_level() -> None:
    assert _render_control_plane_template("gpu-namespaces.yaml.j2") == []
    rendered = _render_control_plane_template(
        "gpu-namespaces.yaml.j2",
        vslice_control_plane_gpu_namespaces=["team-a", "team-b"],
        vslice_control_plane_pod_security_level="restricted",
    )
    assert [doc["metadata"]["name"] for doc in rendered] == ["team-a", "team-b"]  # type: ignore[index]
    for doc in rendered:
        labels = doc["metadata"]["labels"]  # type: ignore[index]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_no_pod_label_opts_out_of_the_webhook() -> None:
    (configuration,) = _render_control_plane_template(
        "webhook.yaml.j2",
        _vslice_control_plane_webhook_url="https://127.0.0.1:8443/mutate",
        __vslice_control_plane_ca_bundle={"content": "Q0E="},
    )
    (hook,) = configuration["webhooks"]  # type: ignore[index]
    assert "objectSelector" not in hook
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": "vslice.io/webhook", "operator": "NotIn", "values": ["disabled"]} in expressions


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
    # Outside a role, templates are looked up beside the playbook.
    (tmp_path / "templates").symlink_to(role / "templates")
    (tmp_path / "pki").mkdir()
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
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
    cert = x509.load_pem_x509_certificate((tmp_path / "pki" / "webhook-client.crt").read_bytes())
    (cn,) = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert cn.value == "kube-apiserver-webhook-client"
    assert kubeconfig.stat().st_mode & 0o777 == 0o600


def _rendered_webhook(**variables: object) -> dict[str, Any]:
    configuration: Any
    (configuration,) = _render_control_plane_template(
        "webhook.yaml.j2",
        _vslice_control_plane_webhook_url="https://127.0.0.1:8443/mutate",
        __vslice_control_plane_ca_bundle={"content": "Q0E="},
        **variables,
    )
    (hook,) = configuration["webhooks"]
    assert isinstance(hook, dict)
    return hook


@pytest.mark.parametrize(
    "names",
    [
        {},
        {
            "gpu": "example.com/gpu",
            "memory": "example.com/vram",
            "memory_percent": "example.com/vram-percent",
            "cores": "example.com/sm",
        },
    ],
    ids=["defaults", "renamed"],
)
def test_the_roles_webhook_match_conditions_are_the_ones_the_lab_registers(
    names: dict[str, str],
) -> None:
    from vslice_core.resources import ResourceNames
    from vslice_lab.cluster import WEBHOOK_NAME, webhook_configuration

    role_key = {"memory_percent": "memory_percentage"}
    variables = {
        f"vslice_control_plane_resource_{role_key.get(key, key)}": value
        for key, value in names.items()
    }
    hook = _rendered_webhook(**variables)
    resource_names = ResourceNames(**names)
    (lab_hook,) = webhook_configuration("https://x/mutate", b"CA", resource_names)["webhooks"]
    assert hook["name"] == lab_hook["name"] == WEBHOOK_NAME
    assert hook["matchConditions"] == lab_hook["matchConditions"]
    (condition,) = hook["matchConditions"]
    for resource in resource_names.managed():
        assert f"'{resource}'" in condition["expression"]
    if names:
        assert "nvidia.com" not in condition["expression"]


def test_the_roles_viewer_role_is_the_one_the_lab_installs() -> None:
    from vslice_kube.rbac import VIEWER_ROLE, viewer_cluster_role

    rendered = _render_control_plane_template("rbac.yaml.j2")
    documents: list[Any] = rendered
    roles = [doc for doc in documents if doc["metadata"]["name"] == VIEWER_ROLE]
    assert roles == [viewer_cluster_role()]


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


def test_uninstall_removes_the_viewer_role() -> None:
    from vslice_kube.rbac import VIEWER_ROLE

    variables = yaml.safe_load((ROLES / "vslice_uninstall" / "vars" / "main.yml").read_text())
    assert variables["_vslice_uninstall_viewer_role"] == VIEWER_ROLE
    tasks = yaml.safe_load((ROLES / "vslice_uninstall" / "tasks" / "objects.yml").read_text())
    loops = " ".join(str(task.get("loop", "")) for task in tasks)
    assert "_vslice_uninstall_viewer_role" in loops
