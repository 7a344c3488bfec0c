"""The monitoring install objects (vslice_control.install.monitoring): scrape jobs, the
Prometheus Operator and Grafana objects, and the dashboard's queries checked by the real
promtool (each query as a recording rule, so a typo in PromQL fails here, not in Grafana)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from vslice_build import prometheus
from vslice_control.install import monitoring
from vslice_control.install.manifests import objects, to_yaml
from vslice_control.install.values import PrometheusValues, parse_values
from vslice_core.errors import InvalidRequest

TARGETS = {
    "scheduler": ["cp1:8888"],
    "webhook": ["cp1:8443", "cp2:8443"],
    "node_agent": ["gpu1:9400"],
    "monitor": ["gpu1:9401"],
}


def _jobs(values: PrometheusValues) -> dict[str, dict[str, object]]:
    return {str(job["job_name"]): job for job in monitoring.scrape_configs(values)}


def test_four_jobs_https_for_the_control_plane_http_for_the_nodes() -> None:
    values = parse_values({"prometheus": {"targets": TARGETS}}).prometheus
    jobs = _jobs(values)
    assert list(jobs) == list(monitoring.JOB_NAMES)
    assert jobs["vslice-webhook"]["scheme"] == "https"
    assert jobs["vslice-webhook"]["tls_config"] == {"ca_file": "/etc/vslice/prometheus/ca.crt"}
    assert jobs["vslice-webhook"]["static_configs"] == [{"targets": ["cp1:8443", "cp2:8443"]}]
    assert jobs["vslice-monitor"]["scheme"] == "http"
    assert "tls_config" not in jobs["vslice-monitor"]
    assert jobs["vslice-node-agent"]["static_configs"] == [{"targets": ["gpu1:9400"]}]


def test_a_client_certificate_is_shown_to_the_https_jobs_only() -> None:
    values = PrometheusValues(cert_file="/p/tls.crt", key_file="/p/tls.key")
    jobs = _jobs(values)
    assert jobs["vslice-scheduler"]["tls_config"] == {
        "ca_file": "/etc/vslice/prometheus/ca.crt",
        "cert_file": "/p/tls.crt",
        "key_file": "/p/tls.key",
    }
    assert "tls_config" not in jobs["vslice-node-agent"]


def test_with_node_tls_the_node_jobs_are_https_with_the_ca_and_client_certificate() -> None:
    values = PrometheusValues(
        cert_file="/p/tls.crt",
        key_file="/p/tls.key",
        targets=TARGETS,  # type: ignore[arg-type]
        node_tls=True,
    )
    jobs = {str(j["job_name"]): j for j in monitoring.scrape_configs(values)}
    for job in ("vslice-node-agent", "vslice-monitor"):
        assert jobs[job]["scheme"] == "https", job
        assert jobs[job]["tls_config"] == jobs["vslice-scheduler"]["tls_config"], job
    assert jobs["vslice-monitor"]["static_configs"] == [{"targets": ["gpu1:9401"]}]


def test_with_node_tls_the_operators_node_scrape_configs_use_the_client_secret() -> None:
    values = parse_values(
        {
            "prometheus": {
                "targets": TARGETS,
                "operator": True,
                "cert_file": "/p/tls.crt",
                "key_file": "/p/tls.key",
                "node_tls": True,
            }
        }
    )
    found = monitoring.operator_objects(values)
    monitor = next(o for o in found if o["metadata"]["name"] == "vslice-monitor")["spec"]
    assert monitor["scheme"] == "HTTPS"
    assert monitor["tlsConfig"]["cert"] == {
        "secret": {"name": "vslice-prometheus-tls", "key": "tls.crt"}
    }


def test_a_certificate_without_its_key_is_refused_naming_both() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_values({"prometheus": {"cert_file": "/p/tls.crt"}})
    assert "prometheus" in str(caught.value.field)
    assert "'/p/tls.crt'" in str(caught.value) and "key_file None" in str(caught.value)


def test_file_based_discovery_names_one_file_per_job() -> None:
    values = PrometheusValues(targets_dir="/etc/prometheus/vslice/", targets=TARGETS)  # type: ignore[arg-type]
    jobs = _jobs(values)
    assert jobs["vslice-monitor"]["file_sd_configs"] == [
        {"files": ["/etc/prometheus/vslice/vslice-monitor.json"]}
    ]
    assert "static_configs" not in jobs["vslice-monitor"]
    files = monitoring.file_sd_targets(values)
    assert files["vslice-webhook.json"] == [{"targets": ["cp1:8443", "cp2:8443"]}]


def test_operator_and_dashboard_objects_only_when_asked() -> None:
    assert objects(parse_values({}), ["prometheus-operator", "grafana-dashboard"]) == []
    values = parse_values(
        {
            "namespace": "gpu-ops",
            "prometheus": {
                "targets": TARGETS,
                "operator": True,
                "operator_labels": {"release": "kps"},
                "grafana_dashboard": True,
            },
        }
    )
    found = objects(values, ["prometheus-operator", "grafana-dashboard"])
    kinds = [(obj["kind"], obj["metadata"]["name"]) for obj in found]
    assert kinds == [
        ("ScrapeConfig", "vslice-scheduler"),
        ("ScrapeConfig", "vslice-webhook"),
        ("ScrapeConfig", "vslice-node-agent"),
        ("ScrapeConfig", "vslice-monitor"),
        ("PrometheusRule", "vslice"),
        ("ConfigMap", monitoring.DASHBOARD_CONFIGMAP),
    ]
    assert all(obj["metadata"]["namespace"] == "gpu-ops" for obj in found)
    assert all(obj["metadata"]["labels"]["release"] == "kps" for obj in found)
    webhook = found[1]["spec"]
    assert webhook["scheme"] == "HTTPS"
    assert webhook["staticConfigs"] == [{"targets": ["cp1:8443", "cp2:8443"]}]
    assert found[4]["spec"] == monitoring.rules()
    dashboard = found[5]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"][monitoring.DASHBOARD_FILE]) == monitoring.dashboard()
    assert yaml.safe_load_all(to_yaml(found))  # they serialize as the other objects do


def _expressions() -> list[tuple[str, str]]:
    """(panel title, query) of every panel target of the dashboard."""
    return [
        (panel["title"], target["expr"])
        for panel in monitoring.dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def test_every_dashboard_panel_has_a_query_a_description_and_its_own_place() -> None:
    panels = [p for p in monitoring.dashboard()["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    assert all(p["targets"] and p["description"] for p in panels)
    ids = [p["id"] for p in monitoring.dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    found = prometheus.locate()
    if found is None:
        pytest.fail(f"promtool not found: {prometheus.HOW_TO_GET}")
    rules = [
        {"record": f"vslice:dashboard_check_{i}", "expr": expr}
        for i, (_, expr) in enumerate(_expressions())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [str(found.promtool), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_and_rules_use_base_units_only() -> None:
    """No series of the old units (MiB, percent) is queried anywhere."""
    texts = [expr for _, expr in _expressions()]
    texts += [rule["expr"] for g in monitoring.rules()["groups"] for rule in g["rules"]]
    names = {name for text in texts for name in re.findall(r"\bvslice_[a-z_]+", text)}
    assert names, "no vslice series found"
    assert not [n for n in names if n.endswith(("_mib", "_percent"))]
