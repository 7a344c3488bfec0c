"""Service configuration: typed settings read from a YAML file and ``VSLICE_*`` variables.

Lookup order, highest first (documented for users in docs/configuration.md):

1. environment variables ``VSLICE_<SETTING>`` (upper case, e.g. ``VSLICE_LISTEN``),
2. the YAML file given as ``vslice serve <name> --config FILE`` (a flat mapping of settings),
3. the defaults declared on the settings class.

Every service extends :class:`ServiceSettings`; keys a service does not know are an error that
names the key, so a misspelt setting never passes silently. Invalid values raise
:class:`vslice_core.errors.InvalidRequest` naming the setting and the value.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)
from vslice_core.cluster import load_yaml
from vslice_core.errors import InvalidRequest
from vslice_core.resources import ResourceNames

LogLevel = Literal["debug", "info", "warning", "error"]


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``"HOST:PORT"`` (``"[::1]:8443"`` for IPv6) into host and port."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen must be HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


# With leader election, a bind's write gets this long, and the holder stops binding this
# much earlier than a standby may take over (bind timeout plus clock-rate slack).
LEASE_BIND_TIMEOUT_SECONDS = 4.0
LEASE_MARGIN_SECONDS = LEASE_BIND_TIMEOUT_SECONDS + 2.0


class ServiceSettings(BaseSettings):
    """Settings every vslice service shares."""

    model_config = SettingsConfigDict(
        env_prefix="VSLICE_",
        env_nested_delimiter="__",
        case_sensitive=False,
        extra="forbid",
        validate_default=True,
    )

    kubeconfig: str = Field(
        default="",
        description="Path of a kubeconfig file. Empty: in-cluster service account, then "
        "$KUBECONFIG, then ~/.kube/config.",
    )
    listen: str = Field(
        default="127.0.0.1:8080",
        description='Address the service listens on, "HOST:PORT" (port 0 picks a free one).',
    )
    log_level: LogLevel = Field(
        default="info", description="Lowest level written to the log: debug|info|warning|error."
    )
    resources: ResourceNames = Field(
        default_factory=ResourceNames,
        description="Extended-resource names pods use (gpu, memory, memory_percent, cores, "
        "priority); e.g. VSLICE_RESOURCES__GPU=example.com/gpu.",
    )

    @field_validator("listen")
    @classmethod
    def _listen_is_host_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_is_lower_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init values; the environment must win over it.
        return (env_settings, init_settings)

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen)


# Who may read a node's /metrics and /status by default: the Prometheus that scrapes them
# and an operator's (or a test's) own certificate. Any other caller, a tenant's pod included,
# gets 403: those answers name every tenant's pods.
NODE_CLIENT_NAMES = ("vslice-prometheus", "vslice-admin")


def tls_problem(cert_file: str | None, key_file: str | None, client_ca_file: str | None) -> None:
    """ValueError when the TLS settings of one service do not go together."""
    if client_ca_file and not cert_file:
        raise ValueError(
            f"client_ca_file {client_ca_file!r} needs tls_cert_file: client "
            "certificates are only checked over HTTPS"
        )
    if bool(cert_file) != bool(key_file):
        raise ValueError(
            "tls_cert_file and tls_key_file go together, got "
            f"tls_cert_file={cert_file!r}, tls_key_file={key_file!r}"
        )


class NodeTlsSettings(ServiceSettings):
    """HTTPS with client certificates for a node service's routes that name tenants' pods
    (docs/security.md): shared by the node agent and the monitor."""

    tls_cert_file: str = Field(
        default="",
        description="PEM certificate (chain) served over HTTPS, reloaded on change; empty "
        "serves plain HTTP.",
    )
    tls_key_file: str = Field(default="", description="PEM private key of tls_cert_file.")
    client_ca_file: str = Field(
        default="",
        description="PEM CA of the callers' client certificates; when set, /metrics and "
        "/status answer 403 unless the caller shows a certificate from it whose common name "
        "is in client_names (/healthz and /version stay open; needs tls_cert_file).",
    )
    client_names: list[str] = Field(
        default_factory=lambda: list(NODE_CLIENT_NAMES),
        description="Certificate common names allowed to read /metrics and /status when "
        "client_ca_file is set.",
    )

    @model_validator(mode="after")
    def _client_auth_needs_tls(self) -> NodeTlsSettings:
        tls_problem(self.tls_cert_file, self.tls_key_file, self.client_ca_file)
        return self


class NodeServiceSettings(ServiceSettings):
    """Settings shared by the services that run on every GPU node (device plugin, monitor)."""

    node_name: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        description="This node's name in Kubernetes (default: the host name).",
    )
    cache_root: str = Field(
        default="/var/lib/vslice/containers",
        description="Host directory of the containers' shim regions: "
        "<cache_root>/<pod uid>/<container>/vslice.cache.",
    )


class SchedulerSettings(ServiceSettings):
    """``vslice serve scheduler``: the kube-scheduler extender."""

    listen: str = Field(
        default="127.0.0.1:8888", description=ServiceSettings.model_fields["listen"].description
    )
    identity: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        description="Name this replica writes into node locks and the Lease; unique per "
        "running replica.",
    )
    lock_ttl_seconds: float = Field(
        default=15.0,
        gt=0,
        description="A node lock older than this is stale and may be taken over.",
    )
    lock_wait_seconds: float = Field(
        default=3.0,
        gt=0,
        description="How long a bind waits for another replica's node lock before failing "
        "(the scheduler then retries the pod).",
    )
    leader_election: bool = Field(
        default=False,
        description="Only the replica holding the Lease lease_namespace/lease_name binds, "
        "without node locks (one API write per bind); the others stand by (readyz 503) and "
        "take over when it stops renewing. Off: every replica binds, under node locks.",
    )
    lease_namespace: str = Field(default="kube-system", min_length=1)
    lease_name: str = Field(default="vslice-scheduler", min_length=1)
    lease_seconds: float = Field(
        default=15.0,
        gt=8.0,
        description="A holder that stopped renewing keeps the Lease this long; a standby "
        "takes over after it (more than 8 s: the holder stops binding 6 s before).",
    )
    lease_renew_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How often the holder renews and a standby retries.",
    )
    hold_ttl_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Slices a filter set aside for a pod are freed again when no bind "
        "follows within this time.",
    )
    resync_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Watches are restarted with a full relist at least this often.",
    )
    unknown_pod_hold_seconds: float = Field(
        default=5.0,
        gt=0,
        description="A filter hold for a pod the pod watch has not shown within this time "
        "(a pod that does not exist) is dropped.",
    )
    preemption: bool = Field(
        default=True,
        description="A pending GPU pod that fits nowhere evicts the fewest lower-priority "
        "slices (spec.priority) that make it fit on one node, through the Eviction API "
        "(PodDisruptionBudgets respected; preemptionPolicy Never honoured), and that node is "
        "held for it while they end; on the DRA path the same for a pod whose claim "
        "kube-scheduler cannot allocate (docs/preemption.md). false: pods wait for room.",
    )
    allocation_key_file: str = Field(
        default="",
        description="Allocation proof keys ('<key id> <hex key>' per line): every allocation "
        "is signed with the last key, proofs made with any key are accepted. Empty: allocations "
        "are neither signed nor checked.",
    )
    tls_cert_file: str = Field(
        default="",
        description="PEM certificate served over HTTPS; empty serves plain HTTP.",
    )
    tls_key_file: str = Field(default="", description="PEM private key of tls_cert_file.")
    client_ca_file: str = Field(
        default="",
        description="PEM CA that signs the scheduler's client certificate; when set, "
        "/filter, /prioritize and /bind answer only callers with a certificate from it whose "
        "common name is in client_names (needs tls_cert_file).",
    )
    client_names: list[str] = Field(
        default_factory=lambda: ["system:kube-scheduler"],
        description="Certificate common names allowed to call the verbs when client_ca_file "
        "is set.",
    )
    hami_metrics: bool = Field(
        default=False,
        description="Also export HAMi's scheduler series (GPUDeviceMemoryLimit, "
        "GPUDeviceMemoryAllocated, GPUDeviceCoreLimit, GPUDeviceCoreAllocated, "
        "GPUDeviceSharedNum, vGPUPodsDeviceAllocated) with HAMi's names, labels and units, "
        "so HAMi's dashboards work unchanged.",
    )

    @model_validator(mode="after")
    def _client_auth_needs_tls(self) -> SchedulerSettings:
        tls_problem(self.tls_cert_file, self.tls_key_file, self.client_ca_file)
        if self.lease_renew_seconds >= self.lease_seconds - LEASE_MARGIN_SECONDS:
            raise ValueError(
                f"lease_renew_seconds must be below lease_seconds - {LEASE_MARGIN_SECONDS:g} "
                f"(the holder stops binding that early), got lease_renew_seconds="
                f"{self.lease_renew_seconds:g} with lease_seconds={self.lease_seconds:g}"
            )
        return self


class WebhookSettings(ServiceSettings):
    """``vslice serve webhook``: the mutating admission webhook."""

    listen: str = Field(
        default="0.0.0.0:8443", description=ServiceSettings.model_fields["listen"].description
    )
    tls_cert_file: str = Field(
        default="", description="PEM certificate (chain) served over HTTPS; reloaded on change."
    )
    tls_key_file: str = Field(default="", description="PEM private key of tls_cert_file.")
    client_ca_file: str = Field(
        default="",
        description="PEM CA that signs the API server's client certificate for webhooks; when "
        "set, /mutate answers only callers with a certificate from it whose common name is in "
        "client_names (the API server presents one through its AdmissionConfiguration, see "
        "docs/webhook.md). Empty: any caller that reaches the port (compatible default).",
    )
    client_names: list[str] = Field(
        default_factory=lambda: ["kube-apiserver-webhook-client"],
        description="Certificate common names allowed to call /mutate when client_ca_file is set.",
    )
    scheduler_name: str = Field(
        default="vslice-scheduler",
        description="schedulerName set on GPU pods; empty leaves spec.schedulerName alone.",
    )
    hide_gpus_from_other_containers: bool = Field(
        default=False,
        description="Set NVIDIA_VISIBLE_DEVICES=none on the containers of a GPU pod that ask "
        "for no GPU.",
    )
    enforce_quota: bool = Field(
        default=True,
        description="Deny a pod whose GPU memory or cores alone exceed its namespace's "
        "ResourceQuota (needs API access).",
    )
    path: Literal["extender", "dra"] = Field(
        default="extender",
        description="How GPU pods are scheduled, cluster-wide: extender (vslice's scheduler "
        "and device plugin) or dra (the pod's GPU limits become a ResourceClaim of "
        "gpu.vslice.io that kube-scheduler allocates; needs API access). dra_namespaces and "
        "the namespace label vslice.io/path override it (docs/webhook.md, DRA path).",
    )
    dra_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose GPU pods take the DRA path whatever path says (a "
        "namespace's vslice.io/path label still wins).",
    )
    dra_extended_resource: bool = Field(
        default=False,
        description="On the DRA path, leave a pod that asks whole GPUs by count alone (the "
        "GPU resource and no other vslice resource, type, UUID or NUMA selection) as it is, "
        "for kube-scheduler to give it whole GPUs through the DeviceClass whose "
        "extendedResourceName is the GPU resource (install value "
        "device_class_extended_resource); without that DeviceClass such a pod would wait "
        "forever, so set it only where the class is installed (docs/kubernetes-versions.md).",
    )


S = TypeVar("S", bound=ServiceSettings)


def read_config_file(config_path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The YAML file's mapping (empty without a file); errors name the file and the problem."""
    if not config_path:
        return {}
    path = Path(config_path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidRequest(
            f"config file {path}: cannot read: {exc.strerror}", field="config", value=str(path)
        ) from exc
    data = load_yaml(text, f"config file {path}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidRequest(
            f"config file {path}: must be a mapping of settings, got {type(data).__name__}",
            field="config",
            value=str(path),
        )
    return data


def load_settings(cls: type[S], config_path: str | os.PathLike[str] | None = None) -> S:
    """Settings of ``cls`` from the YAML file (optional) overridden by ``VSLICE_*`` variables."""
    values = read_config_file(config_path)
    try:
        return cls(**values)
    except ValidationError as exc:
        raise _invalid_setting(exc, values, config_path) from exc
    except SettingsError as exc:
        raise _unparsable_variable(exc) from exc


def _unparsable_variable(exc: SettingsError) -> InvalidRequest:
    """A nested setting given whole in the environment (``VSLICE_RESOURCES``) as bad JSON."""
    found = re.search(r'field "(\w+)"', str(exc))
    name = found.group(1) if found else "settings"
    variable = f"VSLICE_{name.upper()}"
    value = os.environ.get(variable)
    return InvalidRequest(
        f"settings: {variable} must be a JSON object (or use {variable}__<KEY>), got {value!r}",
        field=name,
        value=value,
    )


def _invalid_setting(
    exc: ValidationError, values: dict[str, Any], config_path: object
) -> InvalidRequest:
    first = exc.errors()[0]
    name = ".".join(str(part) for part in first["loc"]) or "settings"
    where = f"config file {config_path}" if config_path else "settings"
    if first["type"] == "extra_forbidden":
        message = f"{where}: unknown setting {name!r}"
    elif first["type"] == "value_error":  # our validators already name the value
        message = f"{where}: {first['msg'].removeprefix('Value error, ')}"
    else:
        message = f"{where}: {name}: {first['msg']}, got {first.get('input')!r}"
    return InvalidRequest(message, field=name, value=values.get(name, first.get("input")))
