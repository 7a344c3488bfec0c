"""The lab's real Prometheus scrapes every vslice service, loads vslice's rules, and every query
of the shipped Grafana dashboard returns data (docs/monitor.md).

The session lab starts Prometheus when it is installed (``.ci/setup`` puts it in the cache);
a lab without it fails these tests with how to get it, rather than skipping them.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from conftest import LabHandle
from polling import until
from realnode_pods import RealNode, parse_smoke
from vslice_build.prometheus import HOW_TO_GET
from vslice_control.install import monitoring
from vslice_lab import prometheus
from vslice_lab.layout import Layout


def _base(lab: LabHandle) -> str:
    url = prometheus.url(lab.record)
    if url is None:
        pytest.fail(f"the lab runs no Prometheus: {HOW_TO_GET}")
    return url


def _get(lab: LabHandle, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{_base(lab)}{path}{query}", timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def test_every_vslice_service_is_scraped_and_up(services: LabHandle) -> None:
    real = services.record.real_nodes
    assert real, "the session lab has no real node: no agent or monitor to scrape"

    def all_up() -> list[dict[str, Any]] | None:
        targets = _get(services, "/api/v1/targets")["activeTargets"]
        ok = len(targets) == 2 + 2 * len(real) and all(t["health"] == "up" for t in targets)
        return targets if ok else None

    targets = until("every vslice target up", all_up)
    jobs = sorted(t["labels"]["job"] for t in targets)
    assert jobs == sorted(
        ["vslice-scheduler", "vslice-webhook"] + ["vslice-node-agent", "vslice-monitor"] * len(real)
    )
    # Up over https means the certificates verified against the lab's CA; on the nodes also
    # that they accepted the Prometheus's client certificate.
    schemes = {t["labels"]["job"]: t["scrapeUrl"].split("://")[0] for t in targets}
    assert set(schemes.values()) == {"https"}, schemes


def test_the_real_nodes_answer_status_and_metrics_only_to_an_allowed_certificate(
    real_node: RealNode,
) -> None:
    # The operator's certificate (vslice-admin) is let in ...
    assert "vslice_monitor_regions" in real_node.metrics()
    assert real_node.plugin_status()["node"] == real_node.name
    ca = ssl.create_default_context(cafile=str(Layout.at(real_node.lab.state_dir).pki / "ca.crt"))
    for component, path in (("device-plugin", "/status"), ("monitor", "/metrics")):
        # ... a caller without one is not, while probes still get /healthz.
        url = f"https://127.0.0.1:{real_node.port(component)}"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}{path}", timeout=5, context=ca)
        assert refused.value.code == 403, component
        with urllib.request.urlopen(f"{url}/healthz", timeout=5, context=ca) as health:
            assert health.read() == b"ok", component


def test_the_rules_are_loaded_and_evaluate_without_errors(services: LabHandle) -> None:
    expected = {g["name"]: len(g["rules"]) for g in monitoring.rules()["groups"]}

    def evaluated() -> list[dict[str, Any]] | None:
        groups = _get(services, "/api/v1/rules")["groups"]
        done = all(r.get("lastEvaluation", "").startswith("20") for g in groups for r in g["rules"])
        return groups if groups and done else None

    groups = until("the rules evaluated once", evaluated)
    assert {g["name"]: len(g["rules"]) for g in groups} == expected
    broken = [
        (r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"
    ]
    assert broken == []


def test_every_dashboard_query_returns_data(real_node: RealNode, namespace: str) -> None:
    lab = real_node.lab
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu"},
        "spec": {"hard": {"requests.nvidia.com/gpumem": "8192"}},
    }
    lab.core.create_namespaced_resource_quota(namespace, quota, _preload_content=False)
    real_node.smoke_pod(
        namespace,
        "holder",
        # Held until the checks are done, then deleted: the kubelet's SIGTERM ends the hold and
        # the holder frees its memory through the driver (the fake driver cannot see a killed
        # process's memory freed: its card counter is shared across the node's pid namespaces).
        ["hold", "--memory", "1g", "--seconds", "600"],
        memory_mib=2048,
        cores=30,
    )
    real_node.wait_running(namespace, "holder")
    until(
        "the holder holding its memory", lambda: "held_mib" in real_node.logs(namespace, "holder")
    )
    assert int(parse_smoke(real_node.logs(namespace, "holder"))["held_mib"]) >= 1024

    queries = [
        (panel["title"], target["expr"])
        for panel in monitoring.dashboard()["panels"]
        for target in panel.get("targets", [])
    ]
    empty: list[tuple[str, str]] = []
    deadline = time.monotonic() + 90
    for title, expr in queries:
        while not _get(lab, "/api/v1/query", query=expr)["result"]:
            if time.monotonic() > deadline:
                empty.append((title, expr))
                break
            time.sleep(1)
    assert empty == [], "dashboard queries without data in the lab"
    # The holder itself is on the dashboard, with its slice in bytes.
    held = _get(
        lab,
        "/api/v1/query",
        query=f'vslice_container_gpu_memory_limit_bytes{{namespace="{namespace}",pod="holder"}}',
    )["result"]
    assert [float(r["value"][1]) for r in held] == [2048 * 2**20]
    used = _get(
        lab,
        "/api/v1/query",
        query=f'vslice_quota_memory_used_bytes{{namespace="{namespace}"}}',
    )["result"]
    assert [float(r["value"][1]) for r in used] == [2048 * 2**20]
    lab.core.delete_namespaced_pod("holder", namespace)
    until(
        "the holder stopped and gone",
        lambda: (
            not lab.core.list_namespaced_pod(namespace, field_selector="metadata.name=holder").items
        ),
    )


def test_lab_status_prints_prometheus_and_every_components_address(services: LabHandle) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vslice.cli",
            "lab",
            "status",
            "--state-dir",
            str(services.state_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Prometheus: {prometheus.url(services.record)}" in result.stdout
    port = services.record.ports["vslice-webhook"]
    webhook = next(line for line in result.stdout.splitlines() if "vslice-webhook" in line)
    assert f"https://127.0.0.1:{port}" in webhook and webhook.rstrip().endswith("healthy")
