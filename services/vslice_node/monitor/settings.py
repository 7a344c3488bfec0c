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
    dra_checkpoint: str = Field(
        default="/var/lib/kubelet/plugins/gpu.vslice.io/checkpoint.json",
        description="The DRA driver's record of prepared claims: regions of the DRA path are "
        "named by claim UID, and this file (read only) with the pods' resourceClaimStatuses "
        "gives them the pod's name. A missing file means no DRA claims on this node.",
    )
