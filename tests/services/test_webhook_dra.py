"""The webhook's DRA path: HAMi-style GPU pods become a ResourceClaimTemplate they reference,
and users' own ResourceClaims and ResourceClaimTemplates are checked.

Reviews go through ``handle_review`` as the HTTPS route calls it; the API is a fake template
store (no network), the namespace labels a plain lookup.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
from served import apply_patch
from vslice_control.install import admission, rbac
from vslice_control.install.values import parse_values
from vslice_control.webhook import reach
from vslice_control.webhook.draconvert import (
    MANAGED_BY,
    TemplateStore,
    claim_template,
    ensure_template,
    store_for_callers,
)
from vslice_control.webhook.main import handle_review, policy_from
from vslice_control.webhook.policy import WebhookPolicy
from vslice_control.webhook.routing import PATH_LABEL, NamespaceLabels, choose_path
from vslice_core.dra import claims
from vslice_core.dra.claims import CLAIM_NAME
from vslice_core.errors import ClusterError
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_serving.settings import WebhookSettings

GPU, MEM, PCT, CORES = (
    DEFAULT_RESOURCE_NAMES.gpu,
    DEFAULT_RESOURCE_NAMES.memory,
    DEFAULT_RESOURCE_NAMES.memory_percent,
    DEFAULT_RESOURCE_NAMES.cores,
)
DRA = WebhookPolicy(path="dra")


class FakeTemplates:
    """The template store the webhook creates through: records creates, answers 409 for a
    name it already holds (as the API server does)."""

    def __init__(self, stored: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.stored: dict[str, dict[str, Any]] = dict(stored or {})
        self.creates: list[dict[str, Any]] = []
        self.failure: ClusterError | None = None

    def create(self, template: Mapping[str, Any]) -> bool:
        if self.failure is not None:
            raise self.failure
        self.creates.append(copy.deepcopy(dict(template)))
        name = template["metadata"]["name"]
        if name in self.stored:
            return False
        self.stored[name] = copy.deepcopy(dict(template))
        return True

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.stored.get(name)


def container(name: str = "main", **limits: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


def pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": "train-", "namespace": "team-a"}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": list(containers)},
    }


def review_body(
    obj: dict[str, Any],
    operation: str = "CREATE",
    dry_run: bool = False,
    old: dict[str, Any] | None = None,
) -> bytes:
    request: dict[str, Any] = {
        "uid": "req-1",
        "namespace": "team-a",
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
        "dryRun": dry_run,
    }
    if old is not None:
        request["oldObject"] = old
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def respond(
    obj: dict[str, Any],
    policy: WebhookPolicy = DRA,
    templates: TemplateStore | None = None,
    labels: Mapping[str, str] | None = None,
    **request: Any,
) -> dict[str, Any]:
    reply = handle_review(
        review_body(obj, **request),
        policy,
        lambda namespace: None,
        lambda namespace: labels,
        templates,
    )
    assert reply.status == 200, reply.body
    response: dict[str, Any] = json.loads(reply.body)["response"]
    return response


def patched(original: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    assert response["allowed"] is True, response.get("status")
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    result: dict[str, Any] = apply_patch(copy.deepcopy(original), ops)
    return result


def only_template(templates: FakeTemplates) -> dict[str, Any]:
    (template,) = templates.stored.values()
    return template


def test_one_gpu_container_with_memory_and_cores_gets_a_claim_and_loses_its_gpu_limits() -> None:
    templates = FakeTemplates()
    original = pod(container("train", **{GPU: "1", MEM: "8192", CORES: "30", "cpu": "2"}))
    result = patched(original, respond(original, templates=templates))
    template = only_template(templates)
    name = template["metadata"]["name"]
    assert name.startswith("vslice-") and len(name) <= 63
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["metadata"]["namespace"] == "team-a"
    assert template["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vslice"}
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "train"
    assert request["exactly"]["deviceClassName"] == "gpu.vslice.io"
    assert request["exactly"]["count"] == 1
    assert request["exactly"]["capacity"] == {"requests": {"memory": "8192Mi", "cores": "30"}}
    train = result["spec"]["containers"][0]
    assert train["resources"]["limits"] == {"cpu": "2"}
    assert train["resources"]["claims"] == [{"name": "vslice-gpu", "request": "train"}]
    assert result["spec"]["resourceClaims"] == [
        {"name": "vslice-gpu", "resourceClaimTemplateName": name}
    ]
    assert "schedulerName" not in result["spec"]


def test_gpu_requests_are_removed_too_and_the_other_containers_are_left_alone() -> None:
    templates = FakeTemplates()
    gpu = container("train", **{GPU: "1", MEM: "4096"})
    gpu["resources"]["requests"] = {GPU: "1", MEM: "4096", "memory": "1Gi"}
    sidecar = container("logs", cpu="100m")
    original = pod(sidecar, gpu)
    result = patched(original, respond(original, templates=templates))
    logs, train = result["spec"]["containers"]
    assert logs == sidecar
    assert train["resources"]["requests"] == {"memory": "1Gi"}
    assert train["resources"]["limits"] == {}


def test_two_gpus_with_numa_bind_ask_distinct_gpus_on_one_numa_node() -> None:
    templates = FakeTemplates()
    original = pod(
        container(**{GPU: "2", MEM: "20000"}), annotations={"vslice.io/numa-bind": "true"}
    )
    response = respond(original, templates=templates)
    patched(original, response)
    devices = only_template(templates)["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["count"] == 2
    assert {"requests": ["main"], "distinctAttribute": "gpu.vslice.io/uuid"} in devices[
        "constraints"
    ]
    assert {"requests": ["main"], "matchAttribute": "gpu.vslice.io/numaNode"} in devices[
        "constraints"
    ]
    assert not any("numa" in w for w in response.get("warnings", []))


def test_a_type_filter_becomes_a_cel_selector() -> None:
    templates = FakeTemplates()
    original = pod(
        container(**{GPU: "1", MEM: "1000"}), annotations={"nvidia.com/use-gputype": "A100"}
    )
    patched(original, respond(original, templates=templates))
    (request,) = only_template(templates)["spec"]["spec"]["devices"]["requests"]
    (selector,) = request["exactly"]["selectors"]
    # Whole words of the model, as the extender matches them (docs/annotations.md).
    assert selector["cel"]["expression"].endswith(
        '.model.lowerAscii().matches("(^|[^a-z0-9])a100($|[^a-z0-9])")'
    )


def test_100_percent_of_memory_asks_the_whole_card() -> None:
    templates = FakeTemplates()
    original = pod(container(**{GPU: "1", PCT: "100"}))
    patched(original, respond(original, templates=templates))
    (request,) = only_template(templates)["spec"]["spec"]["devices"]["requests"]
    # No memory asked: the device's default, the whole card, which no other claim can share.
    assert "memory" not in request["exactly"].get("capacity", {}).get("requests", {})


def test_50_percent_of_memory_is_refused_saying_what_works_instead() -> None:
    templates = FakeTemplates()
    response = respond(pod(container(**{GPU: "1", PCT: "50"})), templates=templates)
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    message = response["status"]["message"]
    assert "spec.containers[0].resources.limits['nvidia.com/gpumem-percentage']" in message
    assert "50 percent" in message
    assert "ask nvidia.com/gpumem in MiB, or 100 percent for the whole card" in message
    assert "extender path" in message
    assert templates.creates == []


def test_each_gpu_container_gets_its_own_request_of_one_claim() -> None:
    templates = FakeTemplates()
    original = pod(
        container("a", **{GPU: "1", MEM: "1000"}), container("b", **{GPU: "1", MEM: "2000"})
    )
    result = patched(original, respond(original, templates=templates))
    requests = only_template(templates)["spec"]["spec"]["devices"]["requests"]
    assert [r["name"] for r in requests] == ["a", "b"]
    assert [c["resources"]["claims"] for c in result["spec"]["containers"]] == [
        [{"name": CLAIM_NAME, "request": "a"}],
        [{"name": CLAIM_NAME, "request": "b"}],
    ]
    assert len(result["spec"]["resourceClaims"]) == 1


def test_a_pods_own_resource_claims_are_kept_and_vslices_is_appended() -> None:
    templates = FakeTemplates()
    gpu = container(**{GPU: "1", MEM: "1000"})
    gpu["resources"]["claims"] = [{"name": "nic"}]
    original = pod(gpu)
    original["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimName": "rdma"}]
    result = patched(original, respond(original, templates=templates))
    assert result["spec"]["resourceClaims"][0] == {"name": "nic", "resourceClaimName": "rdma"}
    assert result["spec"]["resourceClaims"][1]["name"] == CLAIM_NAME
    assert result["spec"]["containers"][0]["resources"]["claims"] == [
        {"name": "nic"},
        {"name": CLAIM_NAME, "request": "main"},
    ]


def test_a_pod_that_already_has_a_claim_named_vslice_gpu_is_refused() -> None:
    templates = FakeTemplates()
    original = pod(container(**{GPU: "1"}))
    original["spec"]["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimName": "mine"}]
    response = respond(original, templates=templates)
    assert response["allowed"] is False
    assert "spec.resourceClaims[0].name" in response["status"]["message"]
    assert "'vslice-gpu'" in response["status"]["message"]
    assert templates.creates == []


def test_the_extender_path_is_unchanged() -> None:
    templates = FakeTemplates()
    original = pod(container(**{MEM: "3000"}))
    response = respond(original, policy=WebhookPolicy(), templates=templates)
    result = patched(original, response)
    assert result["spec"]["schedulerName"] == "vslice-scheduler"
    assert result["spec"]["containers"][0]["resources"]["limits"] == {MEM: "3000", GPU: "1"}
    assert "resourceClaims" not in result["spec"]
    assert templates.creates == []
    # The same answer as before the DRA path existed (no label lookup, no template store).
    before = handle_review(review_body(original), WebhookPolicy(), lambda namespace: None)
    assert json.loads(before.body)["response"] == response


def test_the_same_manifest_twice_shares_one_template() -> None:
    templates = FakeTemplates()
    original = pod(container(**{GPU: "1", MEM: "4096", CORES: "20"}))
    first = patched(original, respond(original, templates=templates))
    second = patched(original, respond(original, templates=templates))
    assert first == second
    assert len(templates.creates) == 2 and len(templates.stored) == 1
    other = pod(container(**{GPU: "1", MEM: "4097", CORES: "20"}))
    patched(other, respond(other, templates=templates))
    assert len(templates.stored) == 2


def test_a_dry_run_creates_nothing_and_answers_the_same_patch() -> None:
    templates = FakeTemplates()
    original = pod(container(**{GPU: "1", MEM: "4096"}))
    dry = respond(original, templates=templates, dry_run=True)
    assert templates.creates == []
    # Even without API access a dry run answers: it needs no template.
    assert respond(original, templates=None, dry_run=True) == dry
    assert patched(original, dry) == patched(original, respond(original, templates=templates))
    assert len(templates.creates) == 1


def test_a_template_that_already_exists_is_accepted() -> None:
    original = pod(container(**{GPU: "1", MEM: "8192"}))
    first = FakeTemplates()
    patched(original, respond(original, templates=first))
    stored = only_template(first)
    # What the API server stores: quantities in canonical form, defaulted fields added.
    canonical = copy.deepcopy(stored)
    canonical["metadata"]["uid"] = "u-1"
    request = canonical["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    request["capacity"]["requests"]["memory"] = "8Gi"
    request["adminAccess"] = False
    request["tolerations"] = []
    canonical["spec"]["metadata"] = {}
    templates = FakeTemplates({stored["metadata"]["name"]: canonical})
    response = respond(original, templates=templates)
    assert response["allowed"] is True
    assert len(templates.creates) == 1  # tried, got 409, read it back


def test_a_foreign_template_under_vslices_name_refuses_the_pod() -> None:
    original = pod(container(**{GPU: "1", MEM: "8192"}))
    first = FakeTemplates()
    patched(original, respond(original, templates=first))
    foreign = copy.deepcopy(only_template(first))
    foreign["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"][
        "memory"
    ] = "80Gi"
    templates = FakeTemplates({foreign["metadata"]["name"]: foreign})
    response = respond(original, templates=templates)
    assert response["allowed"] is False
    assert (
        "capacity.requests.memory is '80Gi' there, vslice writes '8192Mi'"
        in (response["status"]["message"])
    )


def tenant_look_alike(original: dict[str, Any], change: Any) -> FakeTemplates:
    """A store holding what a tenant created under the name vslice would use for
    ``original``, before vslice did: its own spec, changed by ``change``, and vslice's label."""
    first = FakeTemplates()
    patched(original, respond(original, templates=first))
    look_alike = copy.deepcopy(only_template(first))
    change(look_alike["spec"]["spec"]["devices"])
    assert look_alike["metadata"]["labels"] == MANAGED_BY  # a label proves nothing
    return FakeTemplates({look_alike["metadata"]["name"]: look_alike})


def test_a_tenants_look_alike_with_its_own_selectors_is_refused_naming_the_field() -> None:
    original = pod(container(**{GPU: "1", MEM: "8192"}))

    def pin_a_victims_gpu(devices: dict[str, Any]) -> None:
        devices["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": "device.attributes['gpu.vslice.io'].uuid == 'GPU-victim'"}}
        ]

    templates = tenant_look_alike(original, pin_a_victims_gpu)
    response = respond(original, templates=templates)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "was not written by vslice" in message
    assert "spec.spec.devices.requests[0].exactly.selectors is [" in message
    assert "GPU-victim" in message and "vslice writes none" in message
    assert "delete the template" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("adminAccess", True),
        ("tolerations", [{"operator": "Exists"}]),
    ],
)
def test_a_look_alike_that_adds_any_request_field_is_refused(field: str, value: Any) -> None:
    original = pod(container(**{GPU: "1", MEM: "8192"}))

    def add(devices: dict[str, Any]) -> None:
        devices["requests"][0]["exactly"][field] = value

    response = respond(original, templates=tenant_look_alike(original, add))
    assert response["allowed"] is False
    assert f"exactly.{field} is {value!r} there" in response["status"]["message"]


def test_a_look_alike_with_an_opaque_driver_config_or_a_constraint_is_refused() -> None:
    original = pod(container(**{GPU: "1", MEM: "8192"}))

    def add_config(devices: dict[str, Any]) -> None:
        devices["config"] = [{"opaque": {"driver": "gpu.vslice.io", "parameters": {}}}]

    def add_constraint(devices: dict[str, Any]) -> None:
        devices["constraints"] = [{"matchAttribute": "gpu.vslice.io/numaNode"}]

    for change, field in ((add_config, "config"), (add_constraint, "constraints")):
        response = respond(original, templates=tenant_look_alike(original, change))
        assert response["allowed"] is False
        assert f"spec.spec.devices.{field} is [" in response["status"]["message"]


def test_an_api_failure_refuses_the_pod_naming_the_template() -> None:
    templates = FakeTemplates()
    templates.failure = ClusterError(
        "create ResourceClaimTemplate team-a/x: 403 forbidden", code=403
    )
    response = respond(pod(container(**{GPU: "1"})), templates=templates)
    assert response["allowed"] is False
    assert "403 forbidden" in response["status"]["message"]
    without_api = respond(pod(container(**{GPU: "1"})), templates=None)
    assert without_api["allowed"] is False
    assert "no API access" in without_api["status"]["message"]


def test_a_webhook_that_cannot_authenticate_its_callers_writes_no_template() -> None:
    api = FakeTemplates()
    # Without client_ca_file anyone who reaches the port could post this review.
    response = respond(
        pod(container(**{GPU: "1"})), templates=store_for_callers(api, authenticated=False)
    )
    assert response["allowed"] is False
    assert "client_ca_file is not set" in response["status"]["message"]
    assert api.creates == [] and api.stored == {}
    assert store_for_callers(api, authenticated=True) is api


def test_a_template_deleted_between_409_and_read_is_created_again() -> None:
    class Vanishing(FakeTemplates):
        def create(self, template: Mapping[str, Any]) -> bool:
            self.creates.append(dict(template))
            return len(self.creates) > 1  # 409 first, created the second time

    store = Vanishing()
    template = claim_template("team-a", {"devices": {"requests": []}})
    assert ensure_template(store, template) is None
    assert len(store.creates) == 2


def test_what_dra_does_not_do_becomes_warnings_not_denials() -> None:
    original = pod(
        container(**{GPU: "1", MEM: "1000"}),
        annotations={"hami.io/node-scheduler-policy": "spread"},
    )
    response = respond(original, templates=FakeTemplates())
    assert response["allowed"] is True
    assert any("node policy 'spread'" in w and "DRA path" in w for w in response["warnings"])


def test_invalid_values_are_still_refused_on_the_dra_path() -> None:
    templates = FakeTemplates()
    response = respond(pod(container(**{GPU: "1", CORES: "120"})), templates=templates)
    assert response["allowed"] is False
    assert "nvidia.com/gpucores" in response["status"]["message"]
    assert templates.creates == []


def test_the_templates_the_webhook_writes_pass_its_own_claim_check() -> None:
    # They go through the claims configuration like users' templates do.
    templates = FakeTemplates()
    original = pod(
        container("a", **{GPU: "2", MEM: "1000", CORES: "10"}),
        container("b", **{GPU: "1", PCT: "100"}),
        annotations={"nvidia.com/use-gpuuuid": "GPU-1", "vslice.io/numa-bind": "true"},
    )
    patched(original, respond(original, templates=templates))
    template = only_template(templates)
    assert claims.check(template) == []
    assert template["metadata"]["labels"] == MANAGED_BY


# Path precedence: the namespace label, then dra_namespaces, then the path setting.


@pytest.mark.parametrize(
    ("label", "default", "listed", "expected"),
    [
        (None, "extender", False, "extender"),
        (None, "dra", False, "dra"),
        (None, "extender", True, "dra"),
        ("dra", "extender", False, "dra"),
        ("extender", "dra", False, "extender"),
        ("extender", "extender", True, "extender"),
    ],
)
def test_the_namespace_label_wins_over_the_settings(
    label: str | None, default: Any, listed: bool, expected: str
) -> None:
    labels = {PATH_LABEL: label} if label else {"team": "a"}
    route = choose_path("team-a", labels, default, {"team-a"} if listed else set())
    assert route.path == expected and route.warnings == ()


def test_an_unknown_label_value_falls_back_to_the_settings_with_a_warning() -> None:
    route = choose_path("team-a", {PATH_LABEL: "DRA"}, "extender", {"team-a"})
    assert route.path == "dra"
    (warning,) = route.warnings
    assert "vslice.io/path='DRA'" in warning


def test_the_label_routes_the_pod_through_the_webhook() -> None:
    original = pod(container(**{GPU: "1", MEM: "1000"}))
    extender = WebhookPolicy(path="extender")
    to_dra = patched(original, respond(original, extender, FakeTemplates(), {PATH_LABEL: "dra"}))
    assert "resourceClaims" in to_dra["spec"] and "schedulerName" not in to_dra["spec"]
    listed = WebhookPolicy(dra_namespaces=frozenset({"team-a"}))
    kept = patched(original, respond(original, listed, FakeTemplates(), {PATH_LABEL: "extender"}))
    assert kept["spec"]["schedulerName"] == "vslice-scheduler"


def test_namespace_labels_follow_the_watch() -> None:
    book = NamespaceLabels()
    book.replace([{"metadata": {"name": "team-a", "labels": {PATH_LABEL: "dra"}}}])
    assert book.labels("team-a") == {PATH_LABEL: "dra"}
    book.apply("MODIFIED", {"metadata": {"name": "team-a", "labels": {}}})
    assert book.labels("team-a") == {}
    book.apply("DELETED", {"metadata": {"name": "team-a"}})
    assert book.labels("team-a") is None


def test_the_settings_reach_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSLICE_PATH", "dra")
    monkeypatch.setenv("VSLICE_DRA_NAMESPACES", '["team-b"]')
    policy = policy_from(WebhookSettings())
    assert policy.path == "dra" and policy.dra_namespaces == frozenset({"team-b"})
    monkeypatch.setenv("VSLICE_PATH", "hybrid")
    with pytest.raises(ValueError, match="path"):
        WebhookSettings()


# Users' ResourceClaims and ResourceClaimTemplates.


def resource_claim(capacity: dict[str, str], kind: str = "ResourceClaim") -> dict[str, Any]:
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.vslice.io",
                        "capacity": {"requests": capacity},
                    },
                }
            ]
        }
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "mine", "namespace": "team-a"},
        "spec": spec if kind == "ResourceClaim" else {"spec": spec},
    }


def test_a_claim_with_a_bad_capacity_is_refused_naming_the_field() -> None:
    response = respond(resource_claim({"memory": "1000", "cores": "150"}))
    assert response["allowed"] is False and response["status"]["code"] == 400
    message = response["status"]["message"]
    assert message.startswith("ResourceClaim team-a/mine")
    assert "2 problems" in message
    assert "spec.devices.requests[gpu].exactly.capacity.requests.memory" in message
    assert "spec.devices.requests[gpu].exactly.capacity.requests.cores" in message
    assert "'150'" in message
    assert "patch" not in response


def test_a_template_with_an_unknown_capacity_is_refused() -> None:
    response = respond(resource_claim({"bandwidth": "1"}, kind="ResourceClaimTemplate"))
    assert response["allowed"] is False
    assert "ResourceClaimTemplate team-a/mine" in response["status"]["message"]
    assert "capacity.requests.bandwidth" in response["status"]["message"]


def test_a_good_claim_and_another_drivers_claim_are_admitted() -> None:
    assert respond(resource_claim({"memory": "8Gi", "cores": "50"}))["allowed"] is True
    other = resource_claim({"whatever": "3"})
    other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nic.example.com"
    assert respond(other)["allowed"] is True


def test_an_update_that_keeps_the_spec_is_admitted_even_for_a_bad_claim() -> None:
    bad = resource_claim({"cores": "150"})
    finalized = copy.deepcopy(bad)
    finalized["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    assert respond(finalized, operation="UPDATE", old=bad)["allowed"] is True
    changed = resource_claim({"cores": "200"})
    assert respond(changed, operation="UPDATE", old=bad)["allowed"] is False


def test_a_claim_of_another_api_version_is_refused_as_malformed() -> None:
    claim = resource_claim({"memory": "8Gi"})
    claim["apiVersion"] = "resource.k8s.io/v1beta1"
    response = respond(claim)
    assert response["allowed"] is False
    assert "request.object.apiVersion must be resource.k8s.io/v1" in response["status"]["message"]


# The configurations vslice installs (vslice_control.install; the role and the lab render them).


VALUES = parse_values({"webhook": {"url": "https://127.0.0.1:8443/mutate", "ca_bundle": "Q0E="}})


def test_the_claims_configuration_calls_the_pods_webhook_and_leaves_out_the_same_namespaces() -> (
    None
):
    (claims_hook, _allocations) = admission.claim_configuration(VALUES)["webhooks"]
    (pods_hook,) = admission.pod_configuration(VALUES)["webhooks"]
    assert claims_hook["name"] == "gpu-claims.vslice.io"
    assert claims_hook["clientConfig"] == pods_hook["clientConfig"]
    assert claims_hook["namespaceSelector"] == pods_hook["namespaceSelector"]
    assert claims_hook["sideEffects"] == "None"  # it never changes a claim
    (rule,) = claims_hook["rules"]
    assert rule["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    assert rule["operations"] == ["CREATE", "UPDATE"]


def test_the_pod_configuration_declares_its_side_effect_and_the_rbac_allows_it() -> None:
    (hook,) = admission.pod_configuration(VALUES)["webhooks"]
    assert hook["sideEffects"] == "NoneOnDryRun"
    role = rbac.control_plane_role(VALUES)
    assert {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaimtemplates"],
        "verbs": ["create", "get"],
    } in role["rules"]
    assert any(
        "namespaces" in rule["resources"] and "watch" in rule["verbs"] for rule in role["rules"]
    )


def test_the_claims_match_condition_names_vslices_classes_only() -> None:
    (classes, spec) = reach.claim_match_conditions()
    expression = classes["expression"]
    assert expression.count("(") == expression.count(")")
    assert "r.exactly.deviceClassName == 'gpu.vslice.io'" in expression
    assert "endsWith('.gpu.vslice.io')" in expression
    assert "object.spec.spec.devices" in expression  # templates
    assert "oldObject" in spec["expression"]


# The adapter the webhook creates templates through.


class FakeResourceApi:
    """``ResourceV1Api``'s two template calls, answering as the API server does."""

    def __init__(self, create_status: int | None) -> None:
        self.create_status = create_status
        self.calls: list[str] = []

    def create_namespaced_resource_claim_template(
        self, namespace: str, body: Any, **options: Any
    ) -> Any:
        from kubernetes.client.exceptions import ApiException

        self.calls.append(f"create {namespace}/{body['metadata']['name']}")
        assert options["_request_timeout"]  # never without a timeout
        if self.create_status is not None:
            message = "already exists" if self.create_status == 409 else "forbidden"
            raise ApiException(
                status=self.create_status, reason="x", body=json.dumps({"message": message})
            )
        return None

    def read_namespaced_resource_claim_template(
        self, name: str, namespace: str, **options: Any
    ) -> Any:
        self.calls.append(f"read {namespace}/{name}")

        class Answer:
            data = json.dumps({"metadata": {"name": name, "namespace": namespace}})

        return Answer()


def _adapter(api: FakeResourceApi) -> Any:
    from vslice_kube.claimtemplates import ClaimTemplates

    store = ClaimTemplates.__new__(ClaimTemplates)
    store._api = api  # type: ignore[assignment]
    store._timeout = (1.0, 1.0)
    return store


def test_the_adapter_answers_a_409_as_already_there_and_other_errors_as_cluster_errors() -> None:
    template = claim_template("team-a", {"devices": {"requests": []}})
    name = template["metadata"]["name"]
    assert _adapter(FakeResourceApi(None)).create(template) is True
    exists = FakeResourceApi(409)
    store = _adapter(exists)
    assert store.create(template) is False
    assert store.read("team-a", name)["metadata"]["name"] == name
    assert exists.calls == [f"create team-a/{name}", f"read team-a/{name}"]
    with pytest.raises(ClusterError) as failed:
        _adapter(FakeResourceApi(403)).create(template)
    assert failed.value.code == 403
    assert f"create ResourceClaimTemplate team-a/{name}" in str(failed.value)


BY_NAME = WebhookPolicy(path="dra", dra_extended_resource=True)


def test_whole_gpus_by_count_alone_are_left_for_the_device_class_to_serve_by_name() -> None:
    templates = FakeTemplates()
    original = pod(container("train", **{GPU: "2", "cpu": "1"}))
    response = respond(original, BY_NAME, templates=templates)
    result = patched(original, response)
    assert templates.creates == []
    assert result["spec"]["containers"][0]["resources"] == {"limits": {GPU: "2", "cpu": "1"}}
    assert "resourceClaims" not in result["spec"] and "schedulerName" not in result["spec"]
    # The checks of every GPU pod still run: it gets the default seccomp profile.
    assert result["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize(
    ("limits", "annotations"),
    [
        ({GPU: "1", MEM: "4096"}, None),
        ({GPU: "1", CORES: "100"}, None),
        ({GPU: "1", PCT: "100"}, None),
        ({GPU: "1"}, {"nvidia.com/use-gputype": "l4"}),
        ({GPU: "1"}, {"nvidia.com/numa-bind": "true"}),
    ],
)
def test_anything_beyond_the_count_is_still_converted_into_a_claim(
    limits: dict[str, str], annotations: dict[str, str] | None
) -> None:
    templates = FakeTemplates()
    original = pod(container("train", **limits), annotations=annotations)
    result = patched(original, respond(original, BY_NAME, templates=templates))
    assert len(templates.creates) == 1
    assert result["spec"]["resourceClaims"][0]["name"] == CLAIM_NAME


def test_without_the_setting_a_count_alone_is_converted_as_before() -> None:
    templates = FakeTemplates()
    original = pod(container("train", **{GPU: "1"}))
    result = patched(original, respond(original, DRA, templates=templates))
    (request,) = only_template(templates)["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["count"] == 1
    assert request["exactly"]["capacity"] == {"requests": {"cores": "100"}}
    assert GPU not in result["spec"]["containers"][0]["resources"]["limits"]


def test_the_setting_reaches_the_policy() -> None:
    assert policy_from(WebhookSettings(dra_extended_resource=True)).dra_extended_resource
    assert not policy_from(WebhookSettings()).dra_extended_resource
