"""What the lab does through the API once the control plane answers: install vslice's objects,
create the simulated nodes and wait until kwok reports them Ready.

The objects are the ones an operator installs (``vslice_control.install``, the source the
Ansible role renders from too), built from the lab's values: the lab's services are exempt
from the state-annotation policy by their group, the ``default`` namespace is a GPU namespace
at Pod Security ``baseline``, and the DeviceClass comes only where DRA consumable capacity is
served."""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vslice_control.install.manifests import API_PARTS, objects
from vslice_control.install.values import InstallValues, parse_values
from vslice_core.errors import Timeout
from vslice_kube.client import api_client
from vslice_kube.dra import DraApi
from vslice_kube.installing import apply_objects, wait_established
from vslice_kube.nodes import apply_node, ready_node_names

from vslice_lab import dra
from vslice_lab.inventory import SIMULATED_LABEL, LabNode

SERVICES_GROUP = "vslice:services"
"""Group of the lab's vslice services; the state-annotation policy lets it write them."""
POD_SECURITY_LEVEL = "baseline"
"""Pod Security level of the lab's GPU namespaces: baseline refuses hostPID, host
namespaces, added capabilities, privileged containers and every hostPath volume (so vslice's
directories on the node), while the lab's and users' ordinary pods run without a
securityContext (restricted would demand one of every pod)."""
GPU_NAMESPACES = ("default",)
"""Namespaces the lab labels for Pod Security at ``up`` (tests label their own)."""
WEBHOOK_PARTS = ("webhook", "claims-webhook")
"""Registered only when the lab runs vslice's webhook: with ``failurePolicy: Fail`` and no
webhook, no GPU pod could be created."""


def lab_values(webhook_url: str, ca: Path, *, device_class: bool) -> InstallValues:
    """The lab's choices; every other value is the operator's default."""
    return parse_values(
        {
            "webhook": {
                "url": webhook_url,
                "ca_bundle": base64.b64encode(ca.read_bytes()).decode(),
            },
            "state_writer_groups": [SERVICES_GROUP],
            "gpu_namespaces": list(GPU_NAMESPACES),
            "pod_security_level": POD_SECURITY_LEVEL,
            "device_class": device_class,
        }
    )


def lab_parts(with_webhook: bool) -> tuple[str, ...]:
    """The parts the lab applies: all of them, the webhook's only when it runs."""
    return tuple(part for part in API_PARTS if with_webhook or part not in WEBHOOK_PARTS)


class LabCluster:
    """The lab's own API client (admin) and the few things ``up`` does with it."""

    def __init__(self, kubeconfig: Path) -> None:
        self._client = api_client(kubeconfig, pool_size=16)

    def install(self, values: InstallValues, parts: Sequence[str]) -> None:
        """Apply the objects of ``parts`` (``vslice_control.install.manifests``) in order."""
        apply_objects(self._client, objects(values, parts))

    def apply(self, documents: Sequence[Mapping[str, Any]]) -> None:
        """Apply objects built elsewhere (Kueue's CRDs, webhooks and queues), in order."""
        apply_objects(self._client, documents)

    def wait_crds_established(self, names: Sequence[str], timeout: float) -> None:
        """Wait until the API server serves every named CRD; Timeout lists the ones it does
        not."""
        wait_established(self._client, names, timeout)

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

    def publish_slices(self, simulated: Sequence[LabNode]) -> int:
        """The simulated nodes' ResourceSlices (``vslice_lab.dra``)."""
        return dra.publish(DraApi(self._client), simulated)

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
