"""vslice's install objects from their one source (``vslice_control.install``) and the command
that prints them (``vslice manifests``), as the Ansible role and a chart consume them.

The role's files are compared with this source in tests/ansible/test_roles.py, the lab's
objects in tests/lab/test_lab_install_objects.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from vslice_control.install import admission, apiserver, rbac, scheduler
from vslice_control.install.manifests import API_PARTS, HOST_PARTS, PART_NAMES, objects, to_yaml
from vslice_control.install.values import parse_values
from vslice_core.errors import InvalidRequest
from vslice_serving.settings import SchedulerSettings

URL = "https://192.0.2.10:8443/mutate"
VALUES = {"webhook": {"url": URL, "ca_bundle": "Q0E="}}


def vslice_manifests(*args: str, values: Any = None) -> subprocess.CompletedProcess[str]:
    """The installed ``vslice manifests``, values on standard input as the role gives them."""
    stdin = None if values is None else json.dumps(values)
    command = [sys.executable, "-m", "vslice.cli", "manifests", *args]
    if values is not None:
        command += ["--values", "-"]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)


def test_the_command_prints_every_stored_object_in_apply_order() -> None:
    result = vslice_manifests(values=VALUES)
    assert result.returncode == 0, result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    assert documents == objects(parse_values(VALUES))
    kinds = [doc["kind"] for doc in documents]
    assert kinds[0] == "Namespace"
    assert kinds.index("ServiceAccount") < kinds.index("ClusterRoleBinding")
    assert kinds.index("ValidatingAdmissionPolicy") < kinds.index(
        "ValidatingAdmissionPolicyBinding"
    )
    assert "KubeSchedulerConfiguration" not in kinds  # a host file, printed on request only
    assert "DeviceClass" not in kinds  # device_class is off by default
    assert "&id" not in result.stdout and "*id" not in result.stdout  # no YAML aliases


def test_a_part_prints_only_its_objects_and_the_parts_come_in_apply_order() -> None:
    result = vslice_manifests("--part", "webhook", "--part", "namespace", values=VALUES)
    assert result.returncode == 0, result.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
    assert kinds == ["Namespace", "MutatingWebhookConfiguration"]


def test_a_values_file_may_be_yaml(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("webhook:\n  url: https://vslice.example:8443/mutate\ndevice_class: true\n")
    result = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "manifests", "--values", str(values)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout)]
    assert kinds[-1] == "DeviceClass"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"webhook": {"url": URL, "timeout_seconds": 45}}, "webhook.timeout_seconds"),
        ({"webhook": {"url": URL, "failure_policy": "Sometimes"}}, "webhook.failure_policy"),
        ({"webhook": {"url": "http://192.0.2.10/mutate"}}, "webhook.url"),
        ({"webhook": {"url": URL}, "pod_security_level": "privileged"}, "pod_security_level"),
        ({"webhook": {"url": URL}, "namespcae": "x"}, "namespcae"),
        ({"webhook": {"url": URL}, "kube_scheduler": {"extender_http_timeout": "soon"}}, "soon"),
        ({}, "webhook.url"),
        (["not", "a", "mapping"], "values"),
    ],
    ids=["timeout", "policy", "plain-http", "level", "typo", "duration", "no-url", "list"],
)
def test_bad_values_exit_2_naming_the_field_and_the_value(values: Any, named: str) -> None:
    result = vslice_manifests(values=values)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("vslice manifests: ") and named in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unreadable_values_file_and_an_unknown_part_exit_2(tmp_path: Path) -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "manifests", "--values", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "--values" in missing.stderr
    unknown = vslice_manifests("--part", "helm", values=VALUES)
    assert unknown.returncode == 2 and "helm" in unknown.stderr


def test_every_part_is_listed_in_the_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "manifests", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for part in PART_NAMES:
        assert part in result.stdout
    assert set(API_PARTS) | set(HOST_PARTS) == set(PART_NAMES)


def test_the_lease_the_rbac_names_is_the_extenders_default_unless_given() -> None:
    extenders = SchedulerSettings.model_fields["lease_name"].default
    for given, expected in (({}, extenders), ({"lease_name": "mine"}, "mine")):
        role = rbac.control_plane_role(parse_values({**VALUES, **given}))
        named = [rule for rule in role["rules"] if "resourceNames" in rule]
        assert named == [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [expected],
                "verbs": ["get", "update"],
            }
        ]


def test_the_vslice_namespace_is_excluded_once_and_first() -> None:
    values = parse_values(
        {"namespace": "ops", "webhook": {"url": URL, "excluded_namespaces": ["a", "ops", "b"]}}
    )
    for build in (admission.pod_configuration, admission.claim_configuration):
        for hook in build(values)["webhooks"]:
            assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["ops", "a", "b"]


def test_a_webhook_reached_as_a_service_is_registered_as_one() -> None:
    values = parse_values(
        {"namespace": "ops", "webhook": {"service": {"name": "vslice-webhook", "port": 8443}}}
    )
    (hook,) = admission.pod_configuration(values)["webhooks"]
    assert hook["clientConfig"] == {
        "service": {"namespace": "ops", "name": "vslice-webhook", "port": 8443, "path": "/mutate"}
    }
    assert admission.webhook_address(values) == "vslice-webhook.ops.svc:8443"
    both = {"url": URL, "service": {"name": "vslice-webhook"}}
    with pytest.raises(InvalidRequest, match="webhook: give url or service"):
        parse_values({"webhook": both})


def test_the_api_servers_credentials_are_looked_up_by_the_webhooks_host_and_port() -> None:
    values = parse_values({"webhook": {"url": "https://[fd00::1]:9443/admit"}})
    (user,) = apiserver.webhook_credentials(values)["users"]
    assert user["name"] == "[fd00::1]:9443"
    config = apiserver.admission_configuration(values)
    files = {plugin["configuration"]["kubeConfigFile"] for plugin in config["plugins"]}
    assert files == {"/etc/kubernetes/vslice/admission-webhooks.kubeconfig"}


def test_the_scheduler_configuration_has_an_extender_only_when_given_one() -> None:
    bare = scheduler.configuration(parse_values({}))
    assert "extenders" not in bare
    assert [p["schedulerName"] for p in bare["profiles"]] == [
        "default-scheduler",
        "vslice-scheduler",
    ]
    values = parse_values(
        {
            "kube_scheduler": {
                "extender_url": "https://127.0.0.1:8888",
                "extender_tls": {"ca_file": "/ca.crt", "cert_data": "Q0VSVA=="},
            }
        }
    )
    (extender,) = scheduler.configuration(values)["extenders"]
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {"caFile": "/ca.crt", "certData": "Q0VSVA=="}
    with pytest.raises(InvalidRequest, match="ca_file or ca_data"):
        parse_values({"kube_scheduler": {"extender_tls": {"ca_file": "/a", "ca_data": "Q0E="}}})


@pytest.mark.parametrize(
    ("values", "mapped"),
    [
        ({"device_class": True}, True),
        ({"device_class": True, "resources": {"gpu": "example.com/gpu"}}, True),
        ({"device_class": True, "device_class_extended_resource": False}, False),
        ({"device_class": False}, False),
    ],
)
def test_a_device_class_that_maps_the_gpu_name_takes_dynamic_resources_off_vslices_profile(
    values: dict[str, Any], mapped: bool
) -> None:
    """KEP-5004: the class serves the GPU name, and vslice's profile must then go without the
    plugin that would refuse every sliced pod (docs/kubernetes-versions.md)."""
    parsed = parse_values(values)
    classes = [o for o in objects(parsed, ("device-class",)) if o["kind"] == "DeviceClass"]
    default, vslice = scheduler.configuration(parsed)["profiles"]
    assert "plugins" not in default
    if not values["device_class"]:
        assert classes == [] and "plugins" not in vslice
        return
    (device_class,) = classes
    if mapped:
        assert device_class["spec"]["extendedResourceName"] == parsed.resources.gpu
        assert vslice["plugins"] == {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}
    else:
        assert "extendedResourceName" not in device_class["spec"]
        assert "plugins" not in vslice


def test_the_yaml_keeps_the_builders_key_order_and_long_expressions_on_one_line() -> None:
    text = to_yaml(objects(parse_values(VALUES), ["webhook"]))
    assert text.startswith("---\napiVersion: admissionregistration.k8s.io/v1\nkind: ")
    (line,) = [line for line in text.splitlines() if "expression:" in line]
    assert "object.spec.initContainers" in line
    assert to_yaml([]) == ""
