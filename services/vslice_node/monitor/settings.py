"""Settings of ``vslice serve monitor`` (reference: docs/monitor.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from vslice_serving.settings import NodeServiceSettings, NodeTlsSettings


class MonitorSettings(NodeServiceSettings, NodeTlsSettings):
    """``vslice serve monitor``: the node's metrics exporter."""

    listen: str = Field(
        default="0.0.0.0:9401", description='HTTP(S) address of /metrics and /healthz, "HOST:PORT".'
    )
    backend: Literal["static", "nvml"] = Field(
        default="nvml",
        description="nvml adds whole-GPU metrics from the driver (skipped, with one log line, "
        "when NVML cannot start); static exports container metrics only.",
    )
    limits_root: str = Field(
        default="/var/lib/vslice/limits",
        description="The node agent's handover.limits_root: where each container's "
        "memory-backend mark lies (vslice_container_memory_backend).",
    )
    pod_names: bool = Field(
        default=True,
        description="Look up namespace and pod name of each pod uid in the API server "
        "(best effort: without access the labels stay empty), and leave out the regions of "
        "pods that finished or no longer exist.",
    )
    hami_metrics: bool = Field(
        default=False,
        description="Also export HAMi's vGPU monitor series (vGPU_device_memory_usage_in_bytes, "
        "HostCoreUtilization, ...) with HAMi's names, labels and units, for HAMi's dashboards.",
    )
    pod_names_every_seconds: float = Field(
        default=30.0, gt=0, description="How often pod names are refreshed from the API server."
    )
    idle_after_seconds: float = Field(
        default=600.0,
        gt=0,
        description="A slice none of whose containers launched a kernel this long is idle: "
        "marked vslice.io/idle-since, counted in vslice_idle_memory_gib_hours_total and listed "
        "by vslice top --idle (docs/idle.md).",
    )
    idle_reclaim: bool = Field(
        default=True,
        description="Warn and then evict idle pods in namespaces that opt in with the label "
        "vslice.io/idle-reclaim (none does by default); false: never on this node.",
    )
    idle_grace_seconds: float = Field(
        default=1800.0,
        gt=0,
        description="Between the warning and the eviction, where the namespace's label "
        "vslice.io/idle-grace does not say.",
    )
    idle_check_every_seconds: float = Field(
        default=30.0, gt=0, description="How often idle slices are checked."
    )
    dra_checkpoint: str = Field(
        default="/var/lib/kubelet/plugins/gpu.vslice.io/checkpoint.json",
        description="The DRA driver's record of prepared claims: regions of the DRA path are "
        "named by claim UID, and this file (read only) with the pods' resourceClaimStatuses "
        "gives them the pod's name. A missing file means no DRA claims on this node.",
    )
