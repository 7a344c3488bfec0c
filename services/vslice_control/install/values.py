"""What an installation may choose: the one typed parameter object every install object is built
from (like a chart's ``values.yaml``, with each field documented where it is declared).

The lab builds one in code; the Ansible role writes its variables into one as JSON and hands it
to ``vslice manifests --values -``. ``parse_values`` is the only way in from untyped data: it
refuses an unknown key or a bad value with :class:`vslice_core.errors.InvalidRequest` naming the
field (``webhook.timeout_seconds``) and the value. Names that no installation changes (the
service accounts, the configuration names) are constants of the modules that build the objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from vslice_core.errors import InvalidRequest
from vslice_core.model import validation_message
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames
from vslice_serving.settings import SchedulerSettings

_STRICT = ConfigDict(extra="forbid", frozen=True)

DEFAULT_LEASE_NAME: str = SchedulerSettings.model_fields["lease_name"].default
"""The Lease the extender replicas share unless their settings name another."""


class WebhookService(BaseModel):
    """The webhook reached as a Service of the cluster (how a chart that runs it as a Deployment
    would register it) instead of a URL."""

    model_config = _STRICT

    name: str = Field(min_length=1, description="the Service's name")
    namespace: str | None = Field(
        default=None, description="the Service's namespace; empty: the vslice namespace"
    )
    port: int = Field(default=443, ge=1, le=65535, description="the Service's port")
    path: str = Field(default="/mutate", pattern="^/", description="the admission endpoint")


class WebhookValues(BaseModel):
    """How the API server calls the webhook, for pods and for ResourceClaims alike."""

    model_config = _STRICT

    url: str | None = Field(
        default=None,
        pattern="^https://",
        description="the webhook's URL, e.g. https://192.0.2.10:8443/mutate; or give service",
    )
    service: WebhookService | None = Field(default=None, description="or the webhook's Service")
    ca_bundle: str = Field(
        default="",
        description="base64 of the PEM CA that signed the webhook's certificate (caBundle); "
        "empty: none is set (the API server's own roots)",
    )
    failure_policy: Literal["Fail", "Ignore"] = Field(
        default="Fail", description="what the API server does when the webhook cannot answer"
    )
    timeout_seconds: int = Field(default=10, ge=1, le=30, description="admission timeout")
    excluded_namespaces: tuple[str, ...] = Field(
        default=("kube-system",),
        description="namespaces whose pods never go through the webhook nor the state policy "
        "(the vslice namespace is always one of them); only administrators should create pods "
        "there",
    )

    @model_validator(mode="after")
    def _one_address(self) -> WebhookValues:
        if self.url is not None and self.service is not None:
            raise ValueError(f"give url or service, not both, got url {self.url!r} and a service")
        return self


class ExtenderTls(BaseModel):
    """How kube-scheduler calls an https extender: the CA to trust and the client certificate it
    presents (the extender answers only CN system:kube-scheduler). Each of the three as a file
    on the scheduler's host or inline (base64 of the PEM, so the static pod needs no mount)."""

    model_config = _STRICT

    cert_file: str | None = Field(default=None, description="kube-scheduler's client cert")
    key_file: str | None = Field(default=None, description="its private key")
    ca_file: str | None = Field(default=None, description="the CA of the extender's certificate")
    cert_data: str | None = Field(default=None, description="base64 PEM, instead of cert_file")
    key_data: str | None = Field(default=None, description="base64 PEM, instead of key_file")
    ca_data: str | None = Field(default=None, description="base64 PEM, instead of ca_file")

    @model_validator(mode="after")
    def _file_or_data(self) -> ExtenderTls:
        for part in ("cert", "key", "ca"):
            if getattr(self, f"{part}_file") and getattr(self, f"{part}_data"):
                raise ValueError(f"give {part}_file or {part}_data, not both")
        return self


class KubeSchedulerValues(BaseModel):
    """kube-scheduler's configuration file (a file on the control plane host, not an object)."""

    model_config = _STRICT

    kubeconfig: str = Field(
        default="/etc/kubernetes/scheduler.conf", description="clientConnection.kubeconfig"
    )
    qps: int | None = Field(default=None, gt=0, description="clientConnection.qps; empty: its own")
    burst: int | None = Field(default=None, gt=0, description="clientConnection.burst")
    leader_elect: bool = Field(default=True, description="leaderElection.leaderElect")
    extender_url: str | None = Field(
        default=None,
        pattern="^https?://[^/]+",
        description="where kube-scheduler calls the extender; empty: no extender",
    )
    extender_http_timeout: str = Field(
        default="30s", pattern="^[0-9]+(ms|s|m)$", description="one extender call's timeout"
    )
    extender_tls: ExtenderTls | None = Field(
        default=None, description="the extender's CA and kube-scheduler's client certificate"
    )


class KubeApiserverValues(BaseModel):
    """kube-apiserver's admission configuration: the client certificate it shows the webhook
    (files on the control plane host, named by --admission-control-config-file)."""

    model_config = _STRICT

    admission_config_dir: str = Field(
        default="/etc/kubernetes/vslice",
        description="directory of admission.yaml and admission-webhooks.kubeconfig",
    )
    webhook_client_cert_data: str = Field(
        default="",
        description="base64 of the PEM client certificate (CN kube-apiserver-webhook-client)",
    )
    webhook_client_key_data: str = Field(default="", description="base64 of its PEM key")


class PrometheusTargets(BaseModel):
    """Where each vslice service answers ``GET /metrics``, as ``HOST:PORT``."""

    model_config = _STRICT

    scheduler: tuple[str, ...] = Field(default=(), description="each extender replica (https)")
    webhook: tuple[str, ...] = Field(default=(), description="each webhook replica (https)")
    node_agent: tuple[str, ...] = Field(default=(), description="each node agent (http)")
    monitor: tuple[str, ...] = Field(default=(), description="each node's monitor (http)")


class PrometheusValues(BaseModel):
    """How a Prometheus scrapes vslice (docs/monitor.md): the scrape jobs, the client identity
    it shows the https services, and the optional Prometheus Operator and Grafana objects."""

    model_config = _STRICT

    scrape_interval: str = Field(
        default="30s", pattern="^[0-9]+(ms|s|m)$", description="scrape_interval of every job"
    )
    ca_file: str = Field(
        default="/etc/vslice/prometheus/ca.crt",
        description="on the Prometheus host: the CA of the extender's and webhook's certificates",
    )
    cert_file: str | None = Field(
        default=None, description="on the Prometheus host: its client certificate (optional)"
    )
    key_file: str | None = Field(default=None, description="its private key")
    targets: PrometheusTargets = Field(default_factory=PrometheusTargets)
    node_tls: bool = Field(
        default=False,
        description="scrape the nodes' agent and monitor over https with the client certificate, "
        'as their TLS settings require (docs/monitor.md, "Scraping the nodes")',
    )
    targets_dir: str | None = Field(
        default=None,
        description="read each job's targets from <dir>/vslice-<job>.json (file-based "
        "discovery, so adding a node rewrites a file, not the configuration); empty: the "
        "targets are written into the jobs",
    )
    operator: bool = Field(
        default=False,
        description="also emit Prometheus Operator objects (ScrapeConfig, PrometheusRule)",
    )
    operator_labels: dict[str, str] = Field(
        default_factory=dict,
        description="labels the site's Prometheus selects its ScrapeConfigs and rules by",
    )
    grafana_dashboard: bool = Field(
        default=False,
        description="also emit the dashboard as a ConfigMap for Grafana's dashboard sidecar",
    )

    @model_validator(mode="after")
    def _key_with_cert(self) -> PrometheusValues:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError(
                f"give cert_file and key_file together, got cert_file {self.cert_file!r} and "
                f"key_file {self.key_file!r}"
            )
        return self


class KueueTeamValues(BaseModel):
    """One team's Kueue quota (docs/kueue.md): a ClusterQueue of its name, a LocalQueue of the
    same name in its namespace."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=63, description="the team (and queue) name")
    namespace: str | None = Field(default=None, description="its namespace; empty: the name")
    gpus: int = Field(default=4, ge=0, description="nominal GPUs (slices count one each)")
    memory: str = Field(default="40Gi", description="nominal GPU memory, a quantity (40Gi)")
    cores: int = Field(default=400, ge=0, description="nominal SM share, percent summed")
    cpu: str = Field(default="64", description="nominal CPU (a ClusterQueue covers all asked)")
    ram: str = Field(default="256Gi", description="nominal host memory")


class KueueValues(BaseModel):
    """Kueue's queues for vslice's slices (the part ``kueue-queues``), for a cluster where
    Kueue is installed; none by default."""

    model_config = _STRICT

    queues: bool = Field(
        default=False,
        description="install a ResourceFlavor, and per team a ClusterQueue and a LocalQueue",
    )
    teams: tuple[KueueTeamValues, ...] = Field(default=(), description="the teams and quotas")
    cohort: str = Field(
        default="vslice", min_length=1, description="the cohort the teams lend quota in"
    )
    dra_claims: int | None = Field(
        default=None, ge=0, description="also a quota of this many vslice DRA claims per team"
    )


class InstallValues(BaseModel):
    """Everything an installation may choose; the defaults are the Ansible role's."""

    model_config = _STRICT

    namespace: str = Field(
        default="vslice-system", min_length=1, description="namespace of the service accounts"
    )
    resources: ResourceNames = Field(
        default=DEFAULT_RESOURCE_NAMES,
        description="the extended resource names (the services' `resources` setting)",
    )
    scheduler_name: str = Field(
        default="vslice-scheduler",
        min_length=1,
        description="the kube-scheduler profile the webhook routes GPU pods to",
    )
    lease_name: str = Field(
        default=DEFAULT_LEASE_NAME,
        min_length=1,
        description="the Lease the extender replicas elect a leader with (its setting lease_name)",
    )
    webhook: WebhookValues = Field(default_factory=WebhookValues)
    state_writer_groups: tuple[str, ...] = Field(
        default=(),
        description="groups that may write vslice's pod state besides its service accounts "
        "(the lab's services authenticate with a certificate in such a group)",
    )
    gpu_namespaces: tuple[str, ...] = Field(
        default=(), description="namespaces where tenants run GPU pods, with Pod Security"
    )
    pod_security_level: Literal["baseline", "restricted"] = Field(
        default="baseline", description="pod-security.kubernetes.io/enforce of those namespaces"
    )
    device_class: bool = Field(
        default=False,
        description="install the DRA DeviceClass gpu.vslice.io (needs DRA consumable capacity)",
    )
    device_class_extended_resource: bool = Field(
        default=True,
        description="with device_class: the DeviceClass declares the GPU resource (resources."
        "gpu) as its extendedResourceName, so a pod asking that name alone gets whole GPUs "
        "through DRA on nodes no device plugin advertises it on (Kubernetes 1.36+), and "
        "vslice's scheduler profile runs without the DynamicResources plugin, which would "
        "otherwise refuse every sliced pod (docs/kubernetes-versions.md); false where another "
        "driver's DeviceClass already maps that name",
    )
    kube_scheduler: KubeSchedulerValues = Field(default_factory=KubeSchedulerValues)
    kube_apiserver: KubeApiserverValues = Field(default_factory=KubeApiserverValues)
    prometheus: PrometheusValues = Field(default_factory=PrometheusValues)
    kueue: KueueValues = Field(default_factory=KueueValues)


def parse_values(data: Any) -> InstallValues:
    """Validate loaded data (a mapping; ``None``, an empty file, means every default)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InvalidRequest(
            f"values must be a mapping of fields, got {type(data).__name__}",
            field="values",
            value=data,
        )
    try:
        return InstallValues.model_validate(data)
    except ValidationError as error:
        field, message = validation_message(error)
        raise InvalidRequest(message, field=field, value=error.errors()[0].get("input")) from None
