"""The lab's Prometheus: scrapes every vslice service of the lab and evaluates vslice's rules.

It is started last, once the real nodes' agents and monitors have their ports, with the scrape
jobs and rules a site's Prometheus gets (``vslice_control.install.monitoring``, one source),
filled with the lab's targets: the extender and the webhook over HTTPS, verified with the lab's
CA and shown the client certificate ``vslice-prometheus``; each real node's agent and monitor
the same way (they serve HTTPS with a certificate from the lab CA and answer /metrics only to
allowed client certificates, ``vslice_lab.realnode``). It scrapes and evaluates every 2 s (a
site's default is 30 s) so that tests see a new series within seconds. Its data lives in
``<state>/prometheus`` and starts empty at every ``up``; it listens on loopback like every lab
component.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from vslice_build.prometheus import PrometheusBinaries
from vslice_control.install import monitoring
from vslice_control.install.values import PrometheusTargets, PrometheusValues

from vslice_lab.components import Certificates, Component
from vslice_lab.health import Probe
from vslice_lab.layout import Layout
from vslice_lab.ports import HOST
from vslice_lab.state import LabRecord

PORT_NAME = "prometheus"
INTERVAL = "2s"


def targets(record: LabRecord, real_nodes: Sequence[str]) -> PrometheusTargets:
    """The lab's services by job: what ``record.ports`` says each listens on."""
    ports = record.ports

    def on(key: str) -> tuple[str, ...]:
        return (f"{HOST}:{ports[key]}",) if key in ports else ()

    return PrometheusTargets(
        scheduler=on("vslice-scheduler") if record.webhook else (),
        webhook=on("vslice-webhook") if record.webhook else (),
        node_agent=tuple(t for name in real_nodes for t in on(f"device-plugin-{name}")),
        monitor=tuple(t for name in real_nodes for t in on(f"monitor-{name}")),
    )


def configuration(
    layout: Layout, certs: Certificates, record: LabRecord, real_nodes: Sequence[str]
) -> dict[str, Any]:
    values = PrometheusValues(
        scrape_interval=INTERVAL,
        ca_file=str(certs.ca.cert),
        cert_file=str(certs.prometheus.cert),
        key_file=str(certs.prometheus.key),
        targets=targets(record, real_nodes),
        node_tls=True,
    )
    return {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(rules_path(layout))],
        "scrape_configs": monitoring.scrape_configs(values),
    }


def rules_path(layout: Layout) -> Path:
    return layout.config / monitoring.RULES_FILE


def data_dir(layout: Layout) -> Path:
    return layout.root / "prometheus"


def url(record: LabRecord) -> str | None:
    """Where the lab's Prometheus answers, None when the lab runs none."""
    port = record.ports.get(PORT_NAME)
    return f"http://{HOST}:{port}" if port else None


def probe(record: LabRecord) -> Probe:
    """Prometheus answers ``/-/ready`` with "Prometheus Server is Ready." once it serves."""
    return Probe(f"{url(record)}/-/ready", expect="Ready")


def component(
    binaries: PrometheusBinaries,
    layout: Layout,
    certs: Certificates,
    record: LabRecord,
    real_nodes: Sequence[str],
    port: int,
) -> Component:
    """Write the configuration and rules, empty the data directory; the process to start."""
    config = layout.config / "prometheus.yml"
    config.write_text(yaml.safe_dump(configuration(layout, certs, record, real_nodes)))
    rules_path(layout).write_text(yaml.safe_dump(monitoring.rules(), sort_keys=False))
    data = data_dir(layout)
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    argv = [
        str(binaries.prometheus),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address={HOST}:{port}",
    ]
    return Component(PORT_NAME, argv, probe(record), port=port)
