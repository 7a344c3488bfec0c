"""The ClusterRole ``vslice-viewer`` (docs/sdk.md "Permissions"): bound to nothing else, a
notebook server's service account runs ``vslice top`` and a user's group reads the SDK's
snapshot; neither can read Secrets nor create pods with it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from conftest import LabHandle
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from vslice.snapshot import ClusterSnapshot
from vslice_control.install.rbac import VIEWER_ROLE
from vslice_core.errors import ClusterError
from vslice_kube.client import api_client
from vslice_kube.workloads import Workloads
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(180)

T = TypeVar("T")


@contextmanager
def _bound(lab: LabHandle, name: str, subject: dict[str, str]) -> Iterator[None]:
    """A ClusterRoleBinding of vslice-viewer to ``subject``, deleted afterwards."""
    rbac: Any = k8s.RbacAuthorizationV1Api(lab.api)  # raw JSON bodies
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": VIEWER_ROLE}
    binding = {"metadata": {"name": name}, "roleRef": role, "subjects": [subject]}
    rbac.create_cluster_role_binding(binding, _preload_content=False)
    try:
        yield
    finally:
        rbac.delete_cluster_role_binding(name, _preload_content=False)


def _once_bound(call: Callable[[], T], timeout: float = 15.0) -> T:
    """``call()``, retried while the API server's RBAC cache has not seen the binding yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except ClusterError as error:
            if error.code != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _forbidden(call: Callable[[], object]) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403, caught.value.body
    return str(json.loads(caught.value.body or "{}").get("message"))


@pytest.fixture
def notebook_kubeconfig(lab: LabHandle, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig with the token of the namespace's ``notebook`` service account, bound
    (cluster-wide) to vslice-viewer only, as a JupyterHub notebook server would run."""
    core: Any = lab.core
    core.create_namespaced_service_account(
        namespace, {"metadata": {"name": "notebook"}}, _preload_content=False
    )
    subject = {"kind": "ServiceAccount", "name": "notebook", "namespace": namespace}
    with _bound(lab, f"{namespace}-viewer", subject):
        yield _token_kubeconfig(lab, namespace, tmp_path)


def _token_kubeconfig(lab: LabHandle, namespace: str, tmp_path: Path) -> Path:
    core: Any = lab.core
    response: Any = core.create_namespaced_service_account_token(
        "notebook", namespace, {"spec": {"expirationSeconds": 3600}}, _preload_content=False
    )
    token = json.loads(response.data)["status"]["token"]
    server = f"https://127.0.0.1:{lab.record.ports['kube-apiserver']}"
    ca = str(Layout.at(lab.state_dir).pki / "ca.crt")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "notebook", "user": {"token": token}}],
        "contexts": [
            {
                "name": "nb",
                "context": {"cluster": "lab", "user": "notebook", "namespace": namespace},
            }
        ],
        "current-context": "nb",
    }
    path = tmp_path / "notebook.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def group_api(lab: LabHandle, namespace: str) -> Iterator[k8s.ApiClient]:
    """The lab admin impersonating user ``alice`` of a group bound to vslice-viewer only."""
    group = f"{namespace}-users"
    api = api_client(lab.kubeconfig)
    headers: Any = api.set_default_header  # untyped in the client package
    headers("Impersonate-User", "alice")
    headers("Impersonate-Group", group)
    with _bound(lab, f"{namespace}-group-viewer", {"kind": "Group", "name": group}):
        yield api
    api.close()  # type: ignore[no-untyped-call]


def test_a_notebook_servers_account_bound_to_the_viewer_role_runs_vslice_top(
    lab: LabHandle, notebook_kubeconfig: Path
) -> None:
    def top() -> list[dict[str, Any]]:
        argv = [sys.executable, "-m", "vslice.cli", "top", "--kubeconfig", str(notebook_kubeconfig)]
        result = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=120)
        if "403" in result.stderr:
            raise ClusterError(result.stderr, code=403)  # not yet bound: retried
        assert result.returncode == 0, result.stderr
        rows: list[dict[str, Any]] = json.loads(result.stdout)
        return rows

    rows = _once_bound(top)
    assert {row["node"] for row in rows} >= set(lab.record.nodes)


def test_a_group_bound_to_the_viewer_role_reads_the_snapshot_and_nothing_else(
    lab: LabHandle, namespace: str, group_api: k8s.ApiClient
) -> None:
    calls = Workloads(group_api)
    snapshot = _once_bound(lambda: ClusterSnapshot.read(calls.list_nodes(), calls.list_pods()))
    assert {row.node for row in snapshot.gpus()} >= set(lab.record.nodes)
    # The DRA path's objects too (the real node publishes its ResourceSlice on 1.36).
    slices = calls.list_resource_slices("gpu.vslice.io")
    calls.list_resource_claims()
    assert calls.dra_unavailable is None and slices
    core: Any = k8s.CoreV1Api(group_api)
    message = _forbidden(lambda: core.list_namespaced_secret(namespace, _preload_content=False))
    assert "secrets" in message and "alice" in message
    _forbidden(lambda: core.list_secret_for_all_namespaces(_preload_content=False))
    _forbidden(lambda: core.list_namespaced_config_map(namespace, _preload_content=False))
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    _forbidden(lambda: core.create_namespaced_pod(namespace, pod, _preload_content=False))
