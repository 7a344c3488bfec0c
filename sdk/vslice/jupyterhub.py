"""JupyterHub: slice presets as KubeSpawner ``profile_list`` entries.

In ``jupyterhub_config.py``::

    from vslice.jupyterhub import Preset, profile_list

    c.KubeSpawner.profile_list = profile_list([
        Preset("small", "Small GPU slice", vslice.Slice("8Gi", cores=25)),
        Preset("half", "Half an A100", vslice.Slice("50%", cores=50, gpu_type="A100")),
    ], default="small")

Each entry sets ``extra_resource_limits`` (the slice's limits) and ``extra_annotations``
(its filters and policies) through ``kubespawner_override``, so the single-user pod is the
same kind of pod ``client.run`` creates; the vslice webhook routes it to the vslice scheduler.
This module imports nothing from JupyterHub: the hub only needs the plain dicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vslice.errors import InvalidRequest
from vslice.slices import Slice, format_mib

_SLUG = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class Preset:
    """One choice on the hub's spawn page: a slug, a title and the slice it grants
    (``None``: a server without a GPU).

    ``override`` adds further ``kubespawner_override`` settings (an ``image``, ``cpu_limit``,
    ...) for this preset only.
    """

    slug: str
    display_name: str
    slice: Slice | None
    description: str | None = None
    override: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _SLUG.match(self.slug):
            raise InvalidRequest(
                "slug must be lower-case letters, digits and '-', got " + repr(self.slug),
                field="slug",
                value=self.slug,
            )
        if self.slice is not None and not isinstance(self.slice, Slice):
            raise InvalidRequest(
                f"slice must be a vslice.Slice or None, got {type(self.slice).__name__}",
                field="slice",
            )


def describe(preset: Preset) -> str:
    """The line under the title: what the slice holds."""
    slice = preset.slice
    if slice is None:
        return "No GPU"
    if slice.memory_mib is not None:
        memory = f"{format_mib(slice.memory_mib)} GPU memory"
    elif slice.memory_percent is not None:
        memory = f"{slice.memory_percent}% of the GPU memory"
    else:
        memory = "whole GPU memory"
    cores = "all cores" if slice.cores is None else f"{slice.cores}% of the cores"
    count = f"{slice.gpus} GPU" + ("s" if slice.gpus > 1 else "")
    text = f"{count}: {memory}, {cores}"
    if slice.gpu_type:
        text += f" ({' or '.join(slice.gpu_type)})"
    return text


def profile(preset: Preset, *, default: bool = False) -> dict[str, Any]:
    """One KubeSpawner profile dict for ``preset``."""
    override: dict[str, Any] = {}
    if preset.slice is not None:
        override["extra_resource_limits"] = preset.slice.limits()
        if annotations := preset.slice.annotations():
            override["extra_annotations"] = annotations
    for key, value in preset.override.items():
        override[key] = {**override[key], **value} if key in override else value
    entry: dict[str, Any] = {
        "display_name": preset.display_name,
        "slug": preset.slug,
        "description": preset.description or describe(preset),
        "kubespawner_override": override,
    }
    if default:
        entry["default"] = True
    return entry


def profile_list(presets: Sequence[Preset], *, default: str | None = None) -> list[dict[str, Any]]:
    """KubeSpawner ``profile_list`` entries, in order; ``default`` names the preselected slug."""
    slugs = [preset.slug for preset in presets]
    if duplicates := sorted({slug for slug in slugs if slugs.count(slug) > 1}):
        raise InvalidRequest(
            f"preset slugs must be unique, repeated: {', '.join(duplicates)}",
            field="slug",
            value=duplicates,
        )
    if default is not None and default not in slugs:
        raise InvalidRequest(
            f"No such preset: {default!r}. Options include: {', '.join(slugs)}",
            field="default",
            value=default,
        )
    return [profile(preset, default=preset.slug == default) for preset in presets]
