"""The settings' names from before the groups, still accepted (docs/configuration.md).

Files and environments written before the groups existed name every setting flat
(``cdi_spec_dir: /x``, ``VSLICE_CDI_SPEC_DIR=/x``). :data:`FLAT_KEYS` places each of those
names in its group, and they keep their meaning: the file and the environment are each
regrouped on their own before the environment is laid over the file, so a variable still wins
over the file whichever spelling either of them uses. Within one of them, giving a setting in
both spellings is refused, naming both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, cast

from pydantic import (
    BaseModel,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from vslice_serving.settings import ServiceSettings

from vslice_node.agent.groups import GROUPS

# Every setting's name from before the groups (a flat key of the file, VSLICE_<KEY> in the
# environment) -> (group, setting in the group). Each grouped setting has exactly one.
FLAT_KEYS: dict[str, tuple[str, str]] = {
    "cache_root": ("handover", "cache_root"),
    "container_cache_root": ("handover", "container_cache_root"),
    "limits_root": ("handover", "limits_root"),
    "shim_library": ("handover", "shim_library"),
    "preload_file": ("handover", "preload_file"),
    "context_overhead": ("handover", "context_overhead"),
    "shim_log_level": ("handover", "shim_log_level"),
    "injection": ("handover", "injection"),
    "region_sweep_seconds": ("handover", "region_sweep_seconds"),
    "region_grace_seconds": ("handover", "region_grace_seconds"),
    "memory_backend": ("handover", "memory_backend"),
    "memory_limit_hook": ("handover", "memory_limit_hook"),
    "driver_libraries": ("driver", "libraries"),
    "driver_container_dir": ("driver", "container_dir"),
    "driver_env": ("driver", "env"),
    "driver_mounts": ("driver", "mounts"),
    "host_dev_dir": ("driver", "host_dev_dir"),
    "driver_cdi_devices": ("driver", "cdi_devices"),
    "driver_nvml_library": ("driver", "nvml_library"),
    "driver_host_env": ("driver", "host_env"),
    "cdi_spec_dir": ("cdi", "spec_dir"),
    "cdi_kind": ("cdi", "kind"),
    "device_plugin_dir": ("device_plugin", "dir"),
    "socket_name": ("device_plugin", "socket_name"),
    "resource_name": ("device_plugin", "resource_name"),
    "pod_resources_socket": ("device_plugin", "pod_resources_socket"),
    "allocation_key_file": ("device_plugin", "allocation_key_file"),
    "annotate_every_seconds": ("device_plugin", "annotate_every_seconds"),
    "kubelet_poll_seconds": ("device_plugin", "kubelet_poll_seconds"),
    "api_wait_seconds": ("device_plugin", "api_wait_seconds"),
    "dra": ("dra_driver", "enabled"),
    "dra_gpus": ("dra_driver", "gpus"),
    "kubelet_plugins_registry": ("dra_driver", "kubelet_plugins_registry"),
    "kubelet_plugins_dir": ("dra_driver", "kubelet_plugins_dir"),
    "dra_socket": ("dra_driver", "socket"),
    "dra_publish_seconds": ("dra_driver", "publish_seconds"),
}

# How one source names a setting in a message: (flat key, group, setting) -> the flat spelling
# and the grouped one.
Spelling = Callable[[str, str, str], tuple[str, str]]


def file_spelling(flat: str, group: str, leaf: str) -> tuple[str, str]:
    return flat, f"{group}.{leaf}"


def env_spelling(flat: str, group: str, leaf: str) -> tuple[str, str]:
    prefix = ServiceSettings.model_config.get("env_prefix", "")
    delimiter = ServiceSettings.model_config.get("env_nested_delimiter") or "__"
    return f"{prefix}{flat}".upper(), f"{prefix}{group}{delimiter}{leaf}".upper()


class SpellingConflict(ValueError):
    """One source gives a setting both flat and in its group."""

    def __init__(self, names: tuple[str, str], group: str, leaf: str, value: Any) -> None:
        super().__init__(f"{names[0]} and {names[1]} name the same setting: give only one of them")
        self.loc = (group, leaf)
        self.value = value


def regroup(data: Mapping[str, Any], spelling: Spelling = file_spelling) -> dict[str, Any]:
    """``data`` (one source's settings) with every flat key moved into its group.

    Raises :class:`SpellingConflict` when a setting is given both ways. A group given as
    something other than a mapping is left for validation to refuse.
    """
    out = dict(data)
    for key in data:
        # Like the rest of the settings, flat keys match whatever their case.
        place = FLAT_KEYS.get(key.lower())
        if place is None:
            continue
        group, leaf = place
        target = out.get(group, {})
        if isinstance(target, BaseModel):
            target = target.model_dump(exclude_unset=True)
        if not isinstance(target, Mapping):
            continue
        value = out.pop(key)
        if leaf in target:
            raise SpellingConflict(spelling(key.lower(), group, leaf), group, leaf, value)
        out[group] = {**target, leaf: value}
    for group in GROUPS:
        # A group handed over as a model merges with the environment's values like a mapping.
        if isinstance(out.get(group), BaseModel):
            out[group] = out[group].model_dump(exclude_unset=True)
    return out


class RegroupedSource(PydanticBaseSettingsSource):
    """A settings source whose flat keys are moved into their groups before the sources are
    merged: a flat variable must override a grouped key of the file and the other way round,
    which a merge of ungrouped values would turn into a conflict."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        source: PydanticBaseSettingsSource,
        spelling: Spelling,
    ) -> None:
        super().__init__(settings_cls)
        self.source = source
        self.spelling = spelling

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ answers for the whole source

    def __call__(self) -> dict[str, Any]:
        try:
            return regroup(self.source(), self.spelling)
        except SpellingConflict as conflict:
            # Raised as a validation error, so load_settings reports it like any other bad
            # setting (InvalidRequest, exit status 2) instead of a traceback.
            detail = InitErrorDetails(
                type="value_error",
                loc=conflict.loc,
                input=conflict.value,
                ctx={"error": conflict},
            )
            raise ValidationError.from_exception_data(
                self.settings_cls.__name__, [detail]
            ) from None


@functools.cache
def environment_view(settings_cls: type[BaseSettings]) -> type[BaseSettings]:
    """``settings_cls`` plus every flat key as a field of its own: what the environment source
    reads, so that ``VSLICE_CDI_SPEC_DIR`` (and ``VSLICE_DRIVER_ENV__KEY``, JSON lists, ...)
    is found and decoded exactly as before the groups. Never instantiated."""
    flat: dict[str, Any] = {
        key: (GROUPS[group].model_fields[leaf].annotation, None)
        for key, (group, leaf) in FLAT_KEYS.items()
    }
    view = create_model(f"{settings_cls.__name__}Environment", __base__=settings_cls, **flat)
    return cast(type[BaseSettings], view)
