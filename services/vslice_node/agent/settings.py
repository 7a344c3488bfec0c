"""Settings of ``vslice serve device-plugin``, the node agent (reference: docs/configuration.md).

Read like every service's settings (:mod:`vslice_serving.settings`): ``VSLICE_<SETTING>``
variables over the ``--config`` YAML file over these defaults. The settings come in groups
(:mod:`vslice_node.agent.groups`), one per concern; the node-wide settings (node name, API
access, GPU backend, HTTP address and its TLS) stay at the top. The names from before the
groups are still accepted (:mod:`vslice_node.agent.flatkeys`).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import (
    Field,
    model_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource
from vslice_serving.settings import NodeTlsSettings

from vslice_node.agent.flatkeys import (
    RegroupedSource,
    env_spelling,
    environment_view,
    file_spelling,
    regroup,
)
from vslice_node.agent.groups import (
    CdiSettings,
    DevicePluginPathSettings,
    DraDriverSettings,
    DriverSettings,
    HandoverSettings,
)
from vslice_node.handover.container import CONTAINER_LIMITS_DIR


class NodeAgentSettings(NodeTlsSettings):
    """``vslice serve device-plugin``: the node agent (device plugin and DRA driver)."""

    listen: str = Field(
        default="0.0.0.0:9400",
        description='HTTP(S) address of /healthz, /status and /metrics, "HOST:PORT".',
    )
    node_name: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        description="This node's name in Kubernetes (default: the host name).",
    )
    backend: Literal["static", "nvml"] = Field(
        default="nvml",
        description="Where GPUs come from: nvml (real GPUs) or static (the inventory file).",
    )
    inventory: str = Field(
        default="",
        description="Inventory YAML (CLUSTER format) for the static backend; the entry named "
        "node_name is this node's.",
    )
    slots_per_gpu: int = Field(
        default=10, ge=1, le=1000, description="Slices per GPU on the nvml backend."
    )
    handover: HandoverSettings = Field(
        default_factory=HandoverSettings,
        description="What every GPU container gets from vslice: shim, region and limits files.",
    )
    driver: DriverSettings = Field(
        default_factory=DriverSettings,
        description="The GPU driver's files in every GPU container, where vslice brings them.",
    )
    cdi: CdiSettings = Field(
        default_factory=CdiSettings, description="The node-wide CDI spec file."
    )
    device_plugin: DevicePluginPathSettings = Field(
        default_factory=DevicePluginPathSettings,
        description="The kubelet device-plugin front door.",
    )
    dra_driver: DraDriverSettings = Field(
        default_factory=DraDriverSettings,
        description="The DRA front door, vslice's DRA driver gpu.vslice.io.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # As in ServiceSettings the environment wins over the file (the init values), but each
        # is regrouped first; the environment is read through a view that knows the flat names.
        environment = EnvSettingsSource(environment_view(settings_cls))
        return (
            RegroupedSource(settings_cls, environment, env_spelling),
            RegroupedSource(settings_cls, init_settings, file_spelling),
        )

    @model_validator(mode="before")
    @classmethod
    def _flat_keys_into_groups(cls, data: Any) -> Any:
        # The sources regrouped already; this serves model_validate, which bypasses them.
        if isinstance(data, Mapping):
            return regroup(data)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> NodeAgentSettings:
        if self.backend == "static" and not self.inventory:
            raise ValueError("backend static needs inventory (a CLUSTER YAML file), got ''")
        if self.dra_driver.enabled and self.handover.injection != "cdi":
            raise ValueError(
                "dra_driver.enabled needs handover.injection cdi (the kubelet hands DRA devices "
                f"to the runtime only as CDI devices), got injection {self.handover.injection!r}"
            )
        if self.handover.memory_backend == "driver" and self.handover.injection != "cdi":
            raise ValueError(
                "handover.memory_backend driver needs handover.injection cdi (the hook that "
                "sets a container's limit reaches the runtime only in a CDI spec), got "
                f"injection {self.handover.injection!r}"
            )
        self._distinct_mount_points()
        return self

    def _distinct_mount_points(self) -> None:
        """Two node-wide mounts on one container path would silently hide one of them."""
        handover, driver = self.handover, self.driver
        directory = PurePosixPath(driver.container_dir)
        points = {
            handover.shim_library: "handover.shim_library",
            "/etc/ld.so.preload": "handover.preload_file",
            CONTAINER_LIMITS_DIR: "the limits file (handover.limits_root)",
        }
        for i, path in enumerate(driver.libraries):
            points.setdefault(str(directory / PurePosixPath(path).name), f"driver.libraries[{i}]")
        for i, item in enumerate(driver.mounts):
            owner = points.setdefault(item.container_path, f"driver.mounts[{i}]")
            if owner != f"driver.mounts[{i}]":
                raise ValueError(
                    f"driver.mounts[{i}].container_path {item.container_path!r} is already the "
                    f"mount point of {owner}"
                )
