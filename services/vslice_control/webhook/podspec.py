"""Walking a pod's containers as the webhook's rules need them: where each one sits.

Every rule names the field it refuses (``spec.initContainers[0].env[2]``), so each container
comes with its kind and index; entries that are not objects are skipped here and refused by
the core's normalization with a message of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Container:
    init: bool
    index: int
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "")

    @property
    def field(self) -> str:
        """``spec.containers[1]`` or ``spec.initContainers[0]``."""
        return f"spec.{'initContainers' if self.init else 'containers'}[{self.index}]"

    @property
    def key(self) -> tuple[bool, str]:
        """How the core's normalization names the container (init flag and name)."""
        return self.init, self.name


def containers(pod: Mapping[str, Any]) -> list[Container]:
    spec = pod.get("spec") or {}
    found = []
    for init, kind in ((True, "initContainers"), (False, "containers")):
        items = spec.get(kind) if isinstance(spec, Mapping) else None
        for index, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, Mapping):
                found.append(Container(init, index, item))
    return found
