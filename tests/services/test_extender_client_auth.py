"""Only kube-scheduler may call the extender's verbs: HTTPS, a client certificate from the
configured CA and an allowed common name. Probes and scrapers keep GET /healthz, /readyz and
/metrics without one. Also: the settings that switch it on, and node locks that claim to
last longer than the lock TTL.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from served import call
from vslice_control.extender.holds import Holds
from vslice_control.extender.main import VERBS, routes
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.verbs import Extender
from vslice_core.annotations import NODE_LOCK, NodeLock, decode_node_lock, encode_node_lock
from vslice_core.errors import InvalidRequest
from vslice_core.ledger import Ledger
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_kube.nodelock import LockBusy, NodeLocker
from vslice_lab.pki import KeyPair, ensure_ca, issue
from vslice_serving.httpserve import ClientAuth, HttpService, ReloadingTlsContext
from vslice_serving.settings import SchedulerSettings, load_settings

FILTER = {"Pod": {"metadata": {"name": "p", "uid": "u"}, "spec": {}}, "NodeNames": []}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KeyPair]:
    directory = tmp_path_factory.mktemp("pki")
    ca = ensure_ca(directory)
    other = ensure_ca(directory / "other")
    return {
        "ca": ca,
        "serving": issue(
            ca, directory, "ext", common_name="ext", hosts=("127.0.0.1",), server=True, client=False
        ),
        "scheduler": issue(ca, directory, "sched", common_name="system:kube-scheduler"),
        "tenant": issue(ca, directory, "tenant", common_name="alice"),
        "foreign": issue(other, directory / "other", "sched", common_name="system:kube-scheduler"),
    }


@pytest.fixture(scope="module")
def port(pki: dict[str, KeyPair]) -> Iterator[int]:
    ledger = Ledger()
    metrics = ExtenderMetrics(ledger)
    extender = Extender(ledger, Holds(), None, metrics, names=DEFAULT_RESOURCE_NAMES)
    tls = ReloadingTlsContext(
        str(pki["serving"].cert), str(pki["serving"].key), str(pki["ca"].cert)
    )
    auth = ClientAuth(frozenset({"system:kube-scheduler"}), VERBS)
    service = HttpService(
        ("127.0.0.1", 0), routes(extender, metrics, lambda: True), tls=tls, client_auth=auth
    )
    service.start()
    yield service.port
    service.stop()


def client(pki: dict[str, KeyPair], who: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if who is not None:
        context.load_cert_chain(str(pki[who].cert), str(pki[who].key))
    return context


def test_kube_schedulers_certificate_may_call_the_verbs(port: int, pki: dict[str, KeyPair]) -> None:
    reply = call(port, "POST", "/filter", FILTER, tls=client(pki, "scheduler"))
    assert reply.status == 200, reply.body


def test_a_caller_without_a_certificate_is_refused_with_403(
    port: int, pki: dict[str, KeyPair]
) -> None:
    for path in ("/filter", "/prioritize", "/bind"):
        reply = call(port, "POST", path, FILTER, tls=client(pki, None))
        assert reply.status == 403
        assert b"client certificate" in reply.body


def test_a_certificate_with_another_common_name_is_refused(
    port: int, pki: dict[str, KeyPair]
) -> None:
    reply = call(port, "POST", "/bind", {}, tls=client(pki, "tenant"))
    assert reply.status == 403
    assert b"'alice' is not one of: system:kube-scheduler" in reply.body


def test_a_certificate_from_another_ca_fails_the_handshake(
    port: int, pki: dict[str, KeyPair]
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        call(port, "POST", "/filter", FILTER, tls=client(pki, "foreign"))


def test_health_readiness_and_metrics_stay_open_to_probes(
    port: int, pki: dict[str, KeyPair]
) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/status"):
        assert call(port, "GET", path, tls=client(pki, None)).status == 200, path


def test_plain_http_is_not_served_when_tls_is_on(port: int) -> None:
    with pytest.raises(OSError):  # the server closes a connection that is not TLS
        call(port, "POST", "/filter", FILTER)


def test_client_auth_without_tls_is_a_setting_error(tmp_path: Path) -> None:
    config = tmp_path / "s.yaml"
    config.write_text("client_ca_file: /etc/vslice/ca.crt\n")
    with pytest.raises(
        InvalidRequest, match=re.escape("client_ca_file '/etc/vslice/ca.crt' needs")
    ):
        load_settings(SchedulerSettings, config)


def test_client_auth_is_off_by_default() -> None:
    settings = SchedulerSettings()
    assert (settings.tls_cert_file, settings.client_ca_file, settings.allocation_key_file) == (
        "",
        "",
        "",
    )
    assert settings.client_names == ["system:kube-scheduler"]


class LockNodeApi:
    """``read_node`` / ``patch_node`` of one node's annotations, as NodeLocker calls them."""

    def __init__(self, lock: str) -> None:
        self.annotations = {NODE_LOCK: lock}
        self.version = 1

    def read_node(self, name: str, **_: Any) -> Any:
        body = {"metadata": {"resourceVersion": str(self.version), "annotations": self.annotations}}
        return type("R", (), {"data": json.dumps(body).encode()})()

    def patch_node(self, name: str, body: Any, **_: Any) -> None:
        assert isinstance(body, dict), "only the merge patch of acquire is expected here"
        self.annotations = dict(body["metadata"]["annotations"])
        self.version += 1


def test_a_node_lock_expiring_beyond_the_ttl_is_treated_as_expired() -> None:
    forever = encode_node_lock(NodeLock(holder="tenant", expires=datetime(2100, 1, 1, tzinfo=UTC)))
    api = LockNodeApi(forever)
    held = NodeLocker(api, "replica-a", ttl_seconds=15, wait_seconds=0.2).acquire(  # type: ignore[arg-type]
        "n1"
    )
    taken = decode_node_lock(api.annotations[NODE_LOCK])
    assert taken.holder == "replica-a" and held.others_since
    assert taken.expires < datetime.now(UTC) + timedelta(seconds=20)


def test_a_node_lock_within_the_ttl_is_honoured() -> None:
    soon = datetime.now(UTC) + timedelta(seconds=10)
    api = LockNodeApi(encode_node_lock(NodeLock(holder="replica-b", expires=soon)))
    locker = NodeLocker(api, "replica-a", ttl_seconds=15, wait_seconds=0.2)  # type: ignore[arg-type]
    with pytest.raises(LockBusy, match="locked by replica-b"):
        locker.acquire("n1")
