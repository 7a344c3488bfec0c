"""The nodes' /metrics and /status name every tenant's pods, so with ``client_ca_file`` set the
node agent and the monitor answer them only to a client certificate from that CA whose common
name is allowed (by default ``vslice-prometheus`` and ``vslice-admin``); /healthz stays open to
probes. Served over real HTTPS, with certificates made here."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_lab import make_lab
from served import call
from vslice_core.errors import InvalidRequest
from vslice_lab.pki import KeyPair, ensure_ca, issue
from vslice_node.agent.main import http_service
from vslice_node.agent.settings import NodeAgentSettings
from vslice_node.monitor.main import metrics_service, no_names
from vslice_node.monitor.settings import MonitorSettings
from vslice_serving.httpserve import HttpService
from vslice_serving.settings import load_settings
from vslice_shim.region import DeviceLimit, create_region

GPU = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"
POD_UID = "uid-of-a-tenants-pod"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KeyPair]:
    directory = tmp_path_factory.mktemp("pki")
    ca = ensure_ca(directory)
    other = ensure_ca(directory / "other")
    return {
        "ca": ca,
        "serving": issue(
            ca, directory, "node", common_name="node", hosts=("127.0.0.1",), server=True
        ),
        "prometheus": issue(ca, directory, "prom", common_name="vslice-prometheus"),
        "admin": issue(ca, directory, "admin", common_name="vslice-admin"),
        "tenant": issue(ca, directory, "tenant", common_name="alice"),
        "foreign": issue(other, directory / "other", "prom", common_name="vslice-prometheus"),
    }


def tls_settings(pki: dict[str, KeyPair]) -> dict[str, str]:
    return {
        "tls_cert_file": str(pki["serving"].cert),
        "tls_key_file": str(pki["serving"].key),
        "client_ca_file": str(pki["ca"].cert),
    }


def client(pki: dict[str, KeyPair], who: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"].cert))
    if who is not None:
        context.load_cert_chain(str(pki[who].cert), str(pki[who].key))
    return context


@pytest.fixture
def monitor(pki: dict[str, KeyPair], tmp_path: Path) -> Iterator[HttpService]:
    root = tmp_path / "containers"
    (root / POD_UID / "main").mkdir(parents=True)
    create_region(root / POD_UID / "main" / "vslice.cache", [DeviceLimit(GPU, 2**30, 40)])
    settings = MonitorSettings(
        listen="127.0.0.1:0",
        backend="static",
        cache_root=str(root),
        pod_names=False,
        **tls_settings(pki),
    )
    http, _ = metrics_service(settings, no_names)
    http.start()
    yield http
    http.stop()


@pytest.fixture
def agent(pki: dict[str, KeyPair], short_dir: Path, tmp_path: Path) -> Iterator[HttpService]:
    lab = make_lab(short_dir, tmp_path, listen="127.0.0.1:0", **tls_settings(pki))
    lab.plugin.start()
    http = http_service(lab.plugin.settings, lab.plugin)
    http.start()
    yield http
    http.stop()
    lab.plugin.stop()


def test_the_monitor_answers_metrics_to_the_prometheus_and_an_operator_only(
    monitor: HttpService, pki: dict[str, KeyPair]
) -> None:
    for who in ("prometheus", "admin"):
        reply = call(monitor.port, "GET", "/metrics", tls=client(pki, who))
        assert reply.status == 200, who
        assert POD_UID.encode() in reply.body
    for who in (None, "tenant"):
        reply = call(monitor.port, "GET", "/metrics", tls=client(pki, who))
        assert reply.status == 403, who
        assert POD_UID.encode() not in reply.body


def test_the_node_agent_answers_status_and_metrics_to_allowed_certificates_only(
    agent: HttpService, pki: dict[str, KeyPair]
) -> None:
    for path in ("/status", "/metrics"):
        assert call(agent.port, "GET", path, tls=client(pki, "prometheus")).status == 200, path
        assert call(agent.port, "GET", path, tls=client(pki, "admin")).status == 200, path
        refused = call(agent.port, "GET", path, tls=client(pki, None))
        assert refused.status == 403, path
        assert b"client certificate" in refused.body
        named = call(agent.port, "GET", path, tls=client(pki, "tenant"))
        assert named.status == 403, path
        assert b"'alice' is not one of: vslice-admin, vslice-prometheus" in named.body


def test_healthz_stays_open_to_callers_without_a_certificate_on_both(
    monitor: HttpService, agent: HttpService, pki: dict[str, KeyPair]
) -> None:
    for http in (monitor, agent):
        reply = call(http.port, "GET", "/healthz", tls=client(pki, None))
        assert (reply.status, reply.body) == (200, b"ok")


def test_a_certificate_from_another_ca_fails_the_handshake(
    monitor: HttpService, pki: dict[str, KeyPair]
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        call(monitor.port, "GET", "/metrics", tls=client(pki, "foreign"))


def test_plain_http_is_not_served_when_tls_is_on(monitor: HttpService) -> None:
    with pytest.raises(OSError):  # the server closes a connection that is not TLS
        call(monitor.port, "GET", "/metrics")


@pytest.mark.parametrize("settings_class", [MonitorSettings, NodeAgentSettings])
def test_a_client_ca_without_a_serving_certificate_is_a_setting_error(
    settings_class: type[MonitorSettings] | type[NodeAgentSettings], tmp_path: Path
) -> None:
    config = tmp_path / "s.yaml"
    config.write_text("client_ca_file: /etc/vslice/ca.crt\nbackend: nvml\n")
    with pytest.raises(
        InvalidRequest, match=re.escape("client_ca_file '/etc/vslice/ca.crt' needs tls_cert_file")
    ):
        load_settings(settings_class, config)
