"""Every install object, in the order they are applied, grouped in named parts.

A part is what one file of the Ansible role holds (``/etc/vslice/manifests/<part>.yaml``, or
a file of kube-scheduler or kube-apiserver); ``vslice manifests --part NAME`` prints one, and
without ``--part`` it prints every object the API server stores (``API_PARTS``), in apply
order: the namespace before what lives in it, a policy before its binding, the accounts before
the bindings that name them. The files of control plane components are printed only on
request (``HOST_PARTS``): a chart or ``kubectl apply`` has no use for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from vslice_core.errors import InvalidRequest

from vslice_control.install import (
    admission,
    apiserver,
    claimreservation,
    dra,
    idlepolicy,
    kueue,
    monitoring,
    namespaces,
    rbac,
    scheduler,
    statepolicy,
)
from vslice_control.install.values import InstallValues

Builder = Callable[[InstallValues], list[dict[str, Any]]]


@dataclass(frozen=True)
class Part:
    name: str
    build: Builder
    stored: bool
    """True: objects the API server stores; False: a file a control plane component reads."""
    about: str


PARTS: tuple[Part, ...] = (
    Part("namespace", namespaces.vslice_namespace, True, "vslice's namespace"),
    Part("rbac", rbac.objects, True, "service accounts, tokens, ClusterRoles, bindings"),
    Part("state-policy", statepolicy.objects, True, "the state-annotation policy and binding"),
    Part("idle-policy", idlepolicy.objects, True, "the idle-reclaim settings' policy and binding"),
    Part(
        "claim-reservation-policy",
        claimreservation.objects,
        True,
        "the policy and binding that keep a vslice ResourceClaim to one pod",
    ),
    Part("webhook", lambda v: [admission.pod_configuration(v)], True, "the pods' webhook"),
    Part(
        "claims-webhook",
        lambda v: [admission.claim_configuration(v)],
        True,
        "the ResourceClaims' webhook",
    ),
    Part("gpu-namespaces", namespaces.gpu_namespaces, True, "tenant namespaces, Pod Security"),
    Part("device-class", dra.objects, True, "the DRA DeviceClass (with device_class)"),
    Part(
        "prometheus-operator",
        monitoring.operator_objects,
        True,
        "ScrapeConfigs and a PrometheusRule (with prometheus.operator)",
    ),
    Part(
        "grafana-dashboard",
        monitoring.dashboard_objects,
        True,
        "the Grafana dashboard as a ConfigMap (with prometheus.grafana_dashboard)",
    ),
    Part(
        "kueue-queues",
        kueue.values_objects,
        True,
        "Kueue's ResourceFlavor, ClusterQueues and LocalQueues (with kueue.queues)",
    ),
    Part("kube-scheduler-config", scheduler.objects, False, "kube-scheduler's --config file"),
    Part(
        "admission-config",
        lambda v: [apiserver.admission_configuration(v)],
        False,
        "kube-apiserver's --admission-control-config-file",
    ),
    Part(
        "admission-webhooks-kubeconfig",
        lambda v: [apiserver.webhook_credentials(v)],
        False,
        "the client certificate kube-apiserver shows the webhook",
    ),
    Part("prometheus-scrape", monitoring.scrape_part, False, "scrape jobs for a Prometheus"),
    Part("prometheus-rules", monitoring.rules_part, False, "vslice's recording and alert rules"),
)
PART_NAMES = tuple(part.name for part in PARTS)
API_PARTS = tuple(part.name for part in PARTS if part.stored)
HOST_PARTS = tuple(part.name for part in PARTS if not part.stored)


def objects(values: InstallValues, parts: Iterable[str] = API_PARTS) -> list[dict[str, Any]]:
    """The objects of ``parts``, always in apply order whatever order the names come in."""
    wanted = set(parts)
    unknown = sorted(wanted - set(PART_NAMES))
    if unknown:
        raise InvalidRequest(
            f"part must be one of {', '.join(PART_NAMES)}, got {unknown[0]!r}",
            field="part",
            value=unknown[0],
        )
    return [obj for part in PARTS if part.name in wanted for obj in part.build(values)]


class _Dumper(yaml.SafeDumper):
    """Never anchors and aliases: every reader of these files, kube-scheduler's included,
    should see each object written out in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Items of a list indented under their key, as kubectl and the Kubernetes docs write.
        super().increase_indent(flow, False)


def to_yaml(documents: Sequence[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in the order the builders give them (apiVersion and kind
    first); long CEL expressions stay on one line. No documents: an empty text."""
    return yaml.dump_all(
        documents,
        Dumper=_Dumper,
        sort_keys=False,
        explicit_start=True,
        default_flow_style=False,
        width=1 << 20,
        allow_unicode=True,
    )
