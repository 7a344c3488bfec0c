"""The lab installs vslice's objects from the one source (``vslice_control.install``) through
``vslice_kube.installing``: checked here against a small in-process stand-in for the API
server's create / read / replace / merge-patch, so no lab has to run."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from vslice_control.install import statepolicy
from vslice_control.install.manifests import API_PARTS, objects
from vslice_control.install.values import InstallValues
from vslice_core.errors import InvalidRequest
from vslice_kube.client import api_client
from vslice_kube.installing import KINDS, apply_objects
from vslice_lab import configs
from vslice_lab.cluster import SERVICES_GROUP, LabCluster, lab_parts, lab_values
from vslice_lab.pki import KeyPair

URL = "https://127.0.0.1:18443/mutate"


class Store(BaseHTTPRequestHandler):
    """Objects by URL path, answering as the API server does for the calls the lab makes."""

    objects: dict[str, dict[str, Any]]
    requests: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        data: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
        return data

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str) -> None:
        self._answer(code, {"kind": "Status", "code": code, "reason": reason, "message": reason})

    def do_POST(self) -> None:
        self.requests.append(f"POST {self.path}")
        body = self._body()
        path = f"{self.path}/{body['metadata']['name']}"
        if path in self.objects:
            self._status(409, "AlreadyExists")
            return
        body["metadata"]["resourceVersion"] = "1"
        self.objects[path] = body
        self._answer(201, body)

    def do_GET(self) -> None:
        stored = self.objects.get(self.path)
        if stored is None:
            self._status(404, "NotFound")
        else:
            self._answer(200, stored)

    def do_PUT(self) -> None:
        self.requests.append(f"PUT {self.path}")
        body = self._body()
        stored = self.objects.get(self.path)
        if stored is None or body["metadata"].get("resourceVersion") != stored["metadata"].get(
            "resourceVersion"
        ):
            self._status(409, "Conflict")
            return
        body["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
        self.objects[self.path] = body
        self._answer(200, body)

    def do_PATCH(self) -> None:
        self.requests.append(f"PATCH {self.path}")
        stored = self.objects[self.path]
        labels = self._body()["metadata"]["labels"]
        stored["metadata"].setdefault("labels", {}).update(labels)
        self._answer(200, stored)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, type[Store]]]:
    handler = type("Handler", (Store,), {"objects": {}, "requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    cluster = {"server": f"http://127.0.0.1:{httpd.server_address[1]}"}
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": cluster}],
                "users": [{"name": "admin", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "admin"}}],
                "current-context": "fake",
            }
        )
    )
    try:
        yield kubeconfig, handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _values(tmp_path: Path) -> InstallValues:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    return lab_values(URL, ca, device_class=True)


def _stored(handler: type[Store]) -> list[dict[str, Any]]:
    stripped = []
    for body in handler.objects.values():
        body = copy.deepcopy(body)
        body["metadata"].pop("resourceVersion", None)
        stripped.append(body)
    return stripped


def _key(body: dict[str, Any]) -> str:
    return f"{body['kind']}/{body['metadata'].get('namespace', '')}/{body['metadata']['name']}"


def test_the_lab_applies_the_objects_an_operator_gets_and_a_second_up_replaces_them(
    tmp_path: Path, server: tuple[Path, type[Store]]
) -> None:
    kubeconfig, handler = server
    # The default namespace exists, with a label of its own that must survive.
    handler.objects["/api/v1/namespaces/default"] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "default", "labels": {"site": "kept"}, "resourceVersion": "7"},
    }
    values = _values(tmp_path)
    wanted = objects(values, lab_parts(with_webhook=True))
    cluster = LabCluster(kubeconfig)
    try:
        cluster.install(values, lab_parts(with_webhook=True))
        first = {_key(body): body for body in _stored(handler)}
        cluster.install(values, lab_parts(with_webhook=True))
        second = {_key(body): body for body in _stored(handler)}
    finally:
        cluster.close()
    assert second == first
    default = first.pop("Namespace//default")
    assert default["metadata"]["labels"] == {
        "site": "kept",
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    assert first == {_key(body): body for body in wanted if body["metadata"]["name"] != "default"}
    # The second install replaced every object and merged the namespaces' labels again.
    assert sum(r.startswith("PUT ") for r in handler.requests) == len(wanted) - 2
    assert sum(r.startswith("PATCH ") for r in handler.requests) == 3


def test_the_lab_registers_the_webhook_only_when_it_runs_it() -> None:
    assert lab_parts(with_webhook=True) == API_PARTS
    without = lab_parts(with_webhook=False)
    assert "webhook" not in without and "claims-webhook" not in without
    assert "state-policy" in without and "rbac" in without


def test_the_labs_services_are_exempt_from_the_state_policy_by_their_group(
    tmp_path: Path,
) -> None:
    values = _values(tmp_path)
    (policy,) = [
        o
        for o in objects(values)
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"] == statepolicy.POLICY_NAME
    ]
    (condition,) = policy["spec"]["matchConditions"]
    assert f"g in ['{SERVICES_GROUP}']" in condition["expression"]
    assert "system:serviceaccount:vslice-system:vslice-node" in condition["expression"]
    kinds = {o["kind"] for o in objects(values)}
    assert "DeviceClass" in kinds  # on a version with DRA consumable capacity
    assert kinds <= set(KINDS)


def test_an_unknown_kind_is_refused_before_anything_is_applied(
    server: tuple[Path, type[Store]],
) -> None:
    kubeconfig, handler = server
    client = api_client(kubeconfig)
    try:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}
        with pytest.raises(InvalidRequest, match="got 'ConfigMap'"):
            apply_objects(client, [namespace, {"kind": "ConfigMap", "metadata": {"name": "b"}}])
    finally:
        client.close()  # type: ignore[no-untyped-call]
    assert handler.requests == []


def test_the_api_server_shows_the_webhook_its_client_certificate(tmp_path: Path) -> None:
    (tmp_path / "c.crt").write_text("CERT")
    (tmp_path / "c.key").write_text("KEY")
    path = configs.write_admission_config(
        tmp_path, URL, KeyPair(tmp_path / "c.crt", tmp_path / "c.key")
    )
    config = yaml.safe_load(path.read_text())
    kubeconfig = tmp_path / "admission-webhooks.kubeconfig"
    assert {p["configuration"]["kubeConfigFile"] for p in config["plugins"]} == {str(kubeconfig)}
    (user,) = yaml.safe_load(kubeconfig.read_text())["users"]
    assert user["name"] == "127.0.0.1:18443"
    assert user["user"] == {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}
    assert kubeconfig.stat().st_mode & 0o777 == 0o600
