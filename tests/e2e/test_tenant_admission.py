"""A tenant with the ordinary ``edit`` role in its namespace, against the lab's admission.

The tenant is a ServiceAccount bound to the built-in ``edit`` ClusterRole in the test's
namespace, talking to the API server with a token from the TokenRequest API, as a user's
workload or CI job would. It cannot forge, edit or remove vslice's state annotations, place a
GPU pod on a node itself, raise its limits through the environment, opt out of the webhook
with a pod label, or use the host paths and namespaces that Pod Security keeps out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import LabHandle
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from vslice_core.annotations import ALLOCATION, DELIVERED, POD_STATE, decode_allocation
from vslice_kube.client import api_client
from vslice_lab.lab import services_kubeconfig_path
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(180)

GPU_LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}
FORGED = {
    ALLOCATION: json.dumps(
        {
            "version": 1,
            "node": "lab-t4",
            "containers": [
                {"name": "main", "gpus": [{"uuid": "GPU-x", "memory_mib": 15360, "cores": 100}]}
            ],
        }
    ),
    "vslice.io/allocation-proof": "v1:lab-1:00",
    DELIVERED: '{"version": 1, "node": "lab-t4", "containers": ["main"], "time": "2100-01-01"}',
    "vslice.io/bind-time": '{"version": 1, "time": "2020-01-01T00:00:00Z"}',
    # Idle marks a tenant might preset to look busy, or to see a far-off reclaim time.
    "vslice.io/idle-since": '{"version": 1, "time": "2100-01-01T00:00:00Z"}',
    "vslice.io/idle-reclaim-at": '{"version": 1, "time": "2100-01-01T00:00:00Z"}',
}


class Tenant:
    """A CoreV1Api authenticated as the namespace's ``tenant`` ServiceAccount (role edit)."""

    def __init__(self, lab: LabHandle, namespace: str, token: str) -> None:
        configuration = k8s.Configuration()
        configuration.host = f"https://127.0.0.1:{lab.record.ports['kube-apiserver']}"
        configuration.ssl_ca_cert = str(Layout.at(lab.state_dir).pki / "ca.crt")
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        self.api = k8s.ApiClient(configuration)
        self.core = k8s.CoreV1Api(self.api)
        self.namespace = namespace

    def create(self, pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """The created pod and the warnings the API server sent back."""
        response: Any = self.core.create_namespaced_pod(self.namespace, pod, _preload_content=False)
        warnings = response.headers.get_all("Warning") or []
        return json.loads(response.data), list(warnings)

    def refused(self, call: Any) -> tuple[int, str]:
        with pytest.raises(ApiException) as caught:
            call()
        body = json.loads(caught.value.body)
        return int(caught.value.status), str(body.get("message"))

    def patch_annotations(self, name: str, annotations: dict[str, Any]) -> Any:
        body = {"metadata": {"annotations": annotations}}
        return self.core.patch_namespaced_pod(name, self.namespace, body, _preload_content=False)


@pytest.fixture
def tenant(services: LabHandle, namespace: str) -> Iterator[Tenant]:
    core = services.core
    core.create_namespaced_service_account(
        namespace, {"metadata": {"name": "tenant"}}, _preload_content=False
    )
    rbac = k8s.RbacAuthorizationV1Api(services.api)
    binding = {
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
    }
    rbac.create_namespaced_role_binding(namespace, binding, _preload_content=False)
    request = {"spec": {"expirationSeconds": 3600}}
    response: Any = core.create_namespaced_service_account_token(
        "tenant", namespace, request, _preload_content=False
    )
    tenant = Tenant(services, namespace, json.loads(response.data)["status"]["token"])
    yield tenant
    tenant.api.close()  # type: ignore[no-untyped-call]


def _pod(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.invalid/sleep:1"}
    container.update(spec.pop("container", {}))
    container.setdefault("resources", {"limits": GPU_LIMITS})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, **spec.pop("metadata", {})},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0, **spec},
    }


def _bound(services: LabHandle, namespace: str, name: str) -> dict[str, Any]:
    return services.wait_for_pod(
        namespace,
        name,
        lambda p: ALLOCATION in (p["metadata"].get("annotations") or {}),
        what="bound with an allocation",
        timeout=60,
    )


def test_a_forged_allocation_at_creation_is_removed_with_a_warning(
    services: LabHandle, tenant: Tenant, namespace: str
) -> None:
    created, warnings = tenant.create(_pod("forged", FORGED | {"team": "a"}))
    annotations = created["metadata"].get("annotations") or {}
    assert not set(POD_STATE) & set(annotations), annotations
    assert annotations["team"] == "a"
    for key in POD_STATE:
        assert any(key in warning for warning in warnings), (key, warnings)
    # The pod is scheduled like any other: the allocation it gets is the extender's own.
    pod = _bound(services, namespace, "forged")
    allocation = decode_allocation(pod["metadata"]["annotations"][ALLOCATION])
    assert allocation.node == pod["spec"]["nodeName"]
    ((grant,),) = [c.gpus for c in allocation.containers]
    assert grant.memory_mib == 1024 and grant.uuid != "GPU-x"


def test_the_allocation_of_a_bound_pod_cannot_be_edited_removed_or_joined(
    services: LabHandle, tenant: Tenant, namespace: str
) -> None:
    tenant.create(_pod("bound"))
    pod = _bound(services, namespace, "bound")
    granted = pod["metadata"]["annotations"][ALLOCATION]
    tries = {
        ALLOCATION: FORGED[ALLOCATION],  # edit
        DELIVERED: FORGED[DELIVERED],  # add
    }
    for key, value in tries.items():
        status, message = tenant.refused(
            lambda k=key, v=value: tenant.patch_annotations("bound", {k: v})
        )
        assert status in (403, 422) and key in message and "vslice" in message, message
    status, message = tenant.refused(lambda: tenant.patch_annotations("bound", {ALLOCATION: None}))
    assert status in (403, 422) and ALLOCATION in message, message
    # Other annotations stay the owner's to change.
    tenant.patch_annotations("bound", {"team": "b"})
    after = services.read_pod(namespace, "bound")["metadata"]["annotations"]
    assert after[ALLOCATION] == granted and after["team"] == "b"


def test_vslice_services_may_write_the_state_the_tenant_may_not(
    services: LabHandle, tenant: Tenant, namespace: str
) -> None:
    tenant.create(_pod("delivered"))
    _bound(services, namespace, "delivered")
    # The identity the lab's device plugins use (group vslice:services) passes the policy.
    api = api_client(services_kubeconfig_path(Layout.at(services.state_dir)))
    try:
        body = {"metadata": {"annotations": {DELIVERED: FORGED[DELIVERED]}}}
        k8s.CoreV1Api(api).patch_namespaced_pod(
            "delivered", namespace, body, _preload_content=False
        )
    finally:
        api.close()  # type: ignore[no-untyped-call]
    assert services.read_pod(namespace, "delivered")["metadata"]["annotations"][DELIVERED]


def test_a_gpu_pod_with_a_node_name_is_refused(tenant: Tenant) -> None:
    status, message = tenant.refused(lambda: tenant.create(_pod("pinned", nodeName="lab-t4")))
    assert status == 403
    assert "spec.nodeName" in message and "'lab-t4'" in message and "remove" in message


@pytest.mark.parametrize(
    "variable", ["CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT_0", "NVIDIA_VISIBLE_DEVICES"]
)
def test_a_gpu_container_overriding_its_limits_is_refused(tenant: Tenant, variable: str) -> None:
    env = {"env": [{"name": variable, "value": "81920m"}]}
    status, message = tenant.refused(lambda: tenant.create(_pod("env", container=env)))
    assert status == 403
    assert variable in message and "'main'" in message and "env[0]" in message


def test_a_pod_without_gpus_cannot_ask_the_runtime_for_all_gpus(tenant: Tenant) -> None:
    container = {"resources": {}, "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    status, message = tenant.refused(lambda: tenant.create(_pod("sneak", container=container)))
    assert status == 403 and "NVIDIA_VISIBLE_DEVICES" in message and "'all'" in message


def test_a_pod_label_does_not_opt_out_of_the_webhook(tenant: Tenant) -> None:
    labels = {"metadata": {"labels": {"vslice.io/webhook": "disabled"}}}
    created, _ = tenant.create(_pod("optout", **labels))
    assert created["spec"]["schedulerName"] == "vslice-scheduler"
    privileged = {"securityContext": {"privileged": True}}
    status, message = tenant.refused(
        lambda: tenant.create(_pod("optout-privileged", container=privileged, **labels))
    )
    assert status == 403 and "privileged" in message


def test_the_namespace_opt_out_is_not_the_tenants_to_set(tenant: Tenant, namespace: str) -> None:
    body = {"metadata": {"labels": {"vslice.io/webhook": "disabled"}}}
    status, _ = tenant.refused(
        lambda: tenant.core.patch_namespace(namespace, body, _preload_content=False)
    )
    assert status == 403


@pytest.mark.parametrize(
    ("spec", "container", "expected"),
    [
        ({"hostPID": True}, {}, "hostPID"),
        (
            {"volumes": [{"name": "state", "hostPath": {"path": "/var/lib/vslice"}}]},
            {},
            "hostPath",
        ),
        ({}, {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "SYS_ADMIN"),
    ],
    ids=["hostPID", "hostPath", "capabilities"],
)
def test_pod_security_baseline_keeps_host_access_out(
    tenant: Tenant, spec: dict[str, Any], container: dict[str, Any], expected: str
) -> None:
    plain = {"resources": {}, **container}
    status, message = tenant.refused(lambda: tenant.create(_pod("host", container=plain, **spec)))
    assert status == 403 and "baseline" in message and expected in message, message


def test_the_webhook_answers_only_the_api_server(services: LabHandle) -> None:
    """Pods above were mutated, so the API server's certificate is accepted; anyone else who
    reaches the port (here with the lab admin's certificate, from the same CA) is not."""
    import http.client
    import ssl

    pki = Layout.at(services.state_dir).pki
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
    for client in (None, (pki / "admin.crt", pki / "admin.key")):
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        if client is not None:
            context.load_cert_chain(str(client[0]), str(client[1]))
        port = services.record.ports["vslice-webhook"]
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        connection.request("POST", "/mutate", json.dumps(review).encode())
        reply = connection.getresponse()
        assert reply.status == 403, (client, reply.status)
        assert "client certificate" in reply.read().decode()
        connection.close()


@pytest.mark.parametrize("path", ["bindings", "pods/binding"])
def test_a_binding_carrying_an_allocation_is_refused_to_anyone_but_vslice(
    services: LabHandle, namespace: str, path: str
) -> None:
    """Even the lab's admin, who may bind pods, cannot write an allocation through a Binding."""
    body = _pod("unbound", schedulerName="nobody-schedules-this")
    services.core.create_namespaced_pod(namespace, body, _preload_content=False)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "unbound", "annotations": {ALLOCATION: FORGED[ALLOCATION]}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "lab-t4"},
    }
    create = (
        services.core.create_namespaced_binding
        if path == "bindings"
        else lambda ns, b, **kw: services.core.create_namespaced_pod_binding("unbound", ns, b, **kw)
    )
    with pytest.raises(ApiException) as caught:
        create(namespace, binding, _preload_content=False)
    assert caught.value.status == 403
    assert ALLOCATION in json.loads(caught.value.body)["message"]
    assert not services.read_pod(namespace, "unbound")["spec"].get("nodeName")
