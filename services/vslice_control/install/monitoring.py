"""What a Prometheus needs to watch vslice: scrape jobs, the rules, and for sites that run the
Prometheus Operator or Grafana's dashboard sidecar the objects that carry them.

Four jobs, one per kind of service, named as the rules and the dashboard name them:

| job | scheme | path |
|---|---|---|
| ``vslice-scheduler`` | https (the extender's certificate, signed by ``ca_file``) | /metrics |
| ``vslice-webhook`` | https | /metrics |
| ``vslice-node-agent`` | http; https with ``node_tls`` | /metrics |
| ``vslice-monitor`` | http; https with ``node_tls`` | /metrics |

The https jobs verify the services' certificates with the CA and show the client certificate
when one is given. The control-plane services leave /metrics open to scrapers, so there the
identity is for sites that put them behind an authenticating proxy, and for the audit trail;
the nodes' /metrics names every tenant's pods, and nodes serving it over HTTPS answer only
allowed client certificates (``vslice-prometheus`` by default), so there it is required.
Targets are written into the jobs, or read from one file per job (``targets_dir``, file-based
discovery).

vslice's services run on the hosts (systemd units the roles write), not as pods, so there is no
Service or Pod a ServiceMonitor or PodMonitor could select; for the Prometheus Operator the
scrape jobs are emitted as ``ScrapeConfig`` objects (monitoring.coreos.com/v1alpha1, the
operator's object for targets outside the cluster's pods) and the rules as a ``PrometheusRule``.

The rules (``vslice-rules.yaml`` beside this module) and the Grafana dashboard
(``vslice-dashboard.json``) are package files: one text, read here for every consumer.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import yaml

from vslice_control.install.namespaces import PART_OF
from vslice_control.install.values import InstallValues, PrometheusValues

CONTROL_PLANE = "control-plane"
NODE = "node"
JOBS: tuple[tuple[str, str, str], ...] = (
    # (job name, field of PrometheusTargets, where the service runs)
    ("vslice-scheduler", "scheduler", CONTROL_PLANE),
    ("vslice-webhook", "webhook", CONTROL_PLANE),
    ("vslice-node-agent", "node_agent", NODE),
    ("vslice-monitor", "monitor", NODE),
)
JOB_NAMES = tuple(job for job, _, _ in JOBS)
RULES_FILE = "vslice-rules.yaml"
DASHBOARD_FILE = "vslice-dashboard.json"
DASHBOARD_CONFIGMAP = "vslice-grafana-dashboard"
OPERATOR_API = "monitoring.coreos.com/v1"
SCRAPE_CONFIG_API = "monitoring.coreos.com/v1alpha1"


def _package_text(name: str) -> str:
    return (resources.files("vslice_control.install") / name).read_text(encoding="utf-8")


def rules() -> dict[str, Any]:
    """The rule groups, as a Prometheus rule file holds them (``{"groups": [...]}``)."""
    loaded: dict[str, Any] = yaml.safe_load(_package_text(RULES_FILE))
    return loaded


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model (import it, or let the sidecar load the ConfigMap)."""
    loaded: dict[str, Any] = json.loads(_package_text(DASHBOARD_FILE))
    return loaded


def targets_file(job: str) -> str:
    """The file-based discovery file of one job, relative to ``targets_dir``."""
    return f"{job}.json"


def file_sd_targets(prometheus: PrometheusValues) -> dict[str, list[dict[str, Any]]]:
    """Each job's file-based discovery content (a list of target groups), by file name."""
    return {
        targets_file(job): [{"targets": list(getattr(prometheus.targets, field))}]
        for job, field, _ in JOBS
    }


def scheme(where: str, *, node_tls: bool) -> str:
    """The control plane always serves HTTPS; the nodes do when they were given certificates
    (``node_tls``: docs/monitor.md, "Scraping the nodes")."""
    return "https" if where == CONTROL_PLANE or node_tls else "http"


def scrape_configs(prometheus: PrometheusValues) -> list[dict[str, Any]]:
    """The four scrape jobs, as the ``scrape_configs`` list of a Prometheus configuration;
    with ``node_tls`` the node jobs are https like the control plane's, with the same CA and
    client certificate (the nodes' certificates must verify with ``ca_file``)."""
    jobs = []
    for job, field, where in JOBS:
        config: dict[str, Any] = {
            "job_name": job,
            "scrape_interval": prometheus.scrape_interval,
            "metrics_path": "/metrics",
            "scheme": scheme(where, node_tls=prometheus.node_tls),
        }
        if config["scheme"] == "https":
            tls: dict[str, Any] = {"ca_file": prometheus.ca_file}
            if prometheus.cert_file and prometheus.key_file:
                tls |= {"cert_file": prometheus.cert_file, "key_file": prometheus.key_file}
            config["tls_config"] = tls
        if prometheus.targets_dir:
            path = f"{prometheus.targets_dir.rstrip('/')}/{targets_file(job)}"
            config["file_sd_configs"] = [{"files": [path]}]
        else:
            config["static_configs"] = [{"targets": list(getattr(prometheus.targets, field))}]
        jobs.append(config)
    return jobs


def scrape_part(values: InstallValues) -> list[dict[str, Any]]:
    """The host file a site's Prometheus includes: ``{"scrape_configs": [...]}``."""
    return [{"scrape_configs": scrape_configs(values.prometheus)}]


def rules_part(_: InstallValues) -> list[dict[str, Any]]:
    return [rules()]


def _metadata(values: InstallValues, name: str) -> dict[str, Any]:
    labels = dict(PART_OF) | values.prometheus.operator_labels
    return {"name": name, "namespace": values.namespace, "labels": labels}


def operator_objects(values: InstallValues) -> list[dict[str, Any]]:
    """ScrapeConfigs and a PrometheusRule (only with ``prometheus.operator``)."""
    prometheus = values.prometheus
    if not prometheus.operator:
        return []
    found: list[dict[str, Any]] = []
    configs = scrape_configs(prometheus)
    for (_, field, _), config in zip(JOBS, configs, strict=True):
        spec: dict[str, Any] = {
            "scrapeInterval": config["scrape_interval"],
            "metricsPath": config["metrics_path"],
            "scheme": config["scheme"].upper(),
            "staticConfigs": [{"targets": list(getattr(prometheus.targets, field))}],
        }
        if "tls_config" in config:
            # The operator reads the CA and client key from a Secret of the ScrapeConfig's
            # namespace; the site creates it (docs/monitor.md), vslice never handles the key.
            spec["tlsConfig"] = {
                "ca": {"secret": {"name": "vslice-prometheus-tls", "key": "ca.crt"}},
            }
            if prometheus.cert_file:
                spec["tlsConfig"] |= {
                    "cert": {"secret": {"name": "vslice-prometheus-tls", "key": "tls.crt"}},
                    "keySecret": {"name": "vslice-prometheus-tls", "key": "tls.key"},
                }
        found.append(
            {
                "apiVersion": SCRAPE_CONFIG_API,
                "kind": "ScrapeConfig",
                "metadata": _metadata(values, config["job_name"]),
                "spec": spec,
            }
        )
    found.append(
        {
            "apiVersion": OPERATOR_API,
            "kind": "PrometheusRule",
            "metadata": _metadata(values, "vslice"),
            "spec": rules(),
        }
    )
    return found


def dashboard_objects(values: InstallValues) -> list[dict[str, Any]]:
    """The dashboard in a ConfigMap labelled for Grafana's sidecar (``grafana_dashboard: "1"``,
    the label the Grafana chart's sidecar watches by default); only with
    ``prometheus.grafana_dashboard``."""
    if not values.prometheus.grafana_dashboard:
        return []
    metadata = _metadata(values, DASHBOARD_CONFIGMAP)
    metadata["labels"] = metadata["labels"] | {"grafana_dashboard": "1"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": {DASHBOARD_FILE: json.dumps(dashboard(), indent=2, sort_keys=False)},
        }
    ]
