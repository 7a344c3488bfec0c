"""What the lab does through the API once the control plane answers: register the webhook and
the state-annotation policy, install the ``vslice-viewer`` ClusterRole, label the GPU
namespaces for Pod Security, create the simulated nodes and wait until kwok reports them
Ready."""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vslice_control.webhook.claimconfig import claims_webhook_configuration
from vslice_control.webhook.reach import match_conditions
from vslice_control.webhook.statepolicy import state_policy
from vslice_core.errors import Timeout
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames
from vslice_kube.admissionpolicy import apply_validating_admission_policy
from vslice_kube.client import api_client
from vslice_kube.dra import DraApi
from vslice_kube.namespaces import label_namespace
from vslice_kube.nodes import apply_node, ready_node_names
from vslice_kube.rbac import apply_cluster_role, viewer_cluster_role
from vslice_kube.validatingwebhooks import apply_validating_webhook
from vslice_kube.webhooks import apply_mutating_webhook

from vslice_lab import dra
from vslice_lab.inventory import SIMULATED_LABEL, LabNode

WEBHOOK_CONFIGURATION = "vslice-webhook"
WEBHOOK_NAME = "gpu-pods.vslice.io"
"""The name the API server gives when it cannot call the webhook (``failed calling webhook
"gpu-pods.vslice.io"``): only GPU pods (``vslice_control.webhook.reach``) wait for it."""
WEBHOOK_OPT_OUT_LABEL = "vslice.io/webhook"
"""Label a namespace ``vslice.io/webhook: disabled`` to keep the webhook out of it."""
SERVICES_GROUP = "vslice:services"
"""Group of the lab's vslice services; the state-annotation policy lets it write them."""
POD_SECURITY_LEVEL = "baseline"
"""Pod Security level of the lab's GPU namespaces: baseline refuses hostPID, host
namespaces, added capabilities, privileged containers and every hostPath volume (so vslice's
directories on the node), while the lab's and users' ordinary pods run without a
securityContext (restricted would demand one of every pod)."""
GPU_NAMESPACES = ("default",)
"""Namespaces the lab labels for Pod Security at ``up`` (tests label their own)."""


def pod_security_labels(level: str = POD_SECURITY_LEVEL) -> dict[str, str]:
    return {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
    }


def webhook_configuration(
    url: str, ca_pem: bytes, names: ResourceNames = DEFAULT_RESOURCE_NAMES
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration for the vslice webhook served at ``url``; the API
    server calls it only for the pods its ``matchConditions`` select (GPU pods, and pods that
    set what the webhook checks), the others are created without it."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "matchConditions": match_conditions(names),
                "failurePolicy": "Fail",
                # The DRA path creates the pod's ResourceClaimTemplate, never on a dry run.
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system"],
                        },
                        {"key": WEBHOOK_OPT_OUT_LABEL, "operator": "NotIn", "values": ["disabled"]},
                    ]
                },
            }
        ],
    }


class LabCluster:
    """The lab's own API client (admin) and the few things ``up`` does with it."""

    def __init__(self, kubeconfig: Path) -> None:
        self._client = api_client(kubeconfig, pool_size=16)

    def register_webhook(self, url: str, ca: Path) -> None:
        """The pods' mutating configuration and the claims' validating one (same URL)."""
        pods = webhook_configuration(url, ca.read_bytes())
        apply_mutating_webhook(self._client, pods)
        client_config = pods["webhooks"][0]["clientConfig"]
        apply_validating_webhook(self._client, claims_webhook_configuration(client_config))

    def install_state_policy(self) -> None:
        """Only the lab's services (group vslice:services) may write vslice's pod state."""
        apply_validating_admission_policy(self._client, *state_policy(groups=(SERVICES_GROUP,)))

    def install_viewer_role(self) -> None:
        """The ClusterRole ``vslice-viewer`` (docs/sdk.md "Permissions"), for users to bind."""
        apply_cluster_role(self._client, viewer_cluster_role())

    def label_gpu_namespaces(self, names: Sequence[str] = GPU_NAMESPACES) -> None:
        for name in names:
            label_namespace(self._client, name, pod_security_labels())

    def create_nodes(
        self, nodes: Sequence[LabNode], extra_resources: Mapping[str, str] | None = None
    ) -> list[str]:
        """Create (or update) the nodes, 16 at a time; returns their names."""
        manifests = []
        for node in nodes:
            manifest = node.manifest()
            for section in ("capacity", "allocatable"):
                manifest["status"][section].update(extra_resources or {})
            manifests.append(manifest)
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda body: apply_node(self._client, body), manifests))
        return [node.name for node in nodes]

    def install_dra(self, nodes: Sequence[LabNode]) -> int:
        """The DeviceClass and the simulated nodes' ResourceSlices (``vslice_lab.dra``)."""
        return dra.install(DraApi(self._client), nodes)

    def ready_nodes(self) -> set[str]:
        """The nodes that are Ready now, simulated and real."""
        return ready_node_names(self._client)

    def wait_nodes_ready(self, names: Sequence[str], timeout: float) -> None:
        """Wait until kwok reports every node Ready; Timeout lists the ones that are not."""
        deadline = time.monotonic() + timeout
        missing = set(names)
        while time.monotonic() < deadline:
            missing = set(names) - ready_node_names(self._client, f"{SIMULATED_LABEL}=true")
            if not missing:
                return
            time.sleep(0.5)
        shown = ", ".join(sorted(missing)[:5])
        raise Timeout(
            f"kwok did not make {len(missing)} simulated node(s) Ready "
            f"within {timeout:.0f}s: {shown}"
        )

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]
