"""Walking a pod's containers as the webhook's rules need them: where each one sits.

Every rule names the field it refuses (``spec.initContainers[0].env[2]``), so each container
comes with its kind and index. By the time a rule walks them the review's shape has been
checked (``podshape``), so entries that are not objects never reach a rule; the walk still
skips them rather than fail on a pod handed to it directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INIT = "initContainers"
APP = "containers"
EPHEMERAL = "ephemeralContainers"
KINDS = (INIT, APP, EPHEMERAL)


@dataclass(frozen=True)
class Container:
    kind: str
    """``initContainers``, ``containers`` or ``ephemeralContainers``."""
    index: int
    spec: Mapping[str, Any]

    @property
    def init(self) -> bool:
        return self.kind == INIT

    @property
    def name(self) -> str:
        return str(self.spec.get("name") or "")

    @property
    def field(self) -> str:
        """``spec.containers[1]``, ``spec.initContainers[0]``, ``spec.ephemeralContainers[0]``."""
        return f"spec.{self.kind}[{self.index}]"

    @property
    def key(self) -> tuple[bool, str]:
        """How the core's normalization names the container (init flag and name)."""
        return self.init, self.name


def containers(pod: Mapping[str, Any]) -> list[Container]:
    """Init containers, then containers: the ones that can ask for GPUs."""
    return _walk(pod, (INIT, APP))


def every_container(pod: Mapping[str, Any]) -> list[Container]:
    """:func:`containers`, then the ephemeral ones (never asking for GPUs, but running beside
    those that do)."""
    return _walk(pod, KINDS)


def _walk(pod: Mapping[str, Any], kinds: tuple[str, ...]) -> list[Container]:
    spec = pod.get("spec") or {}
    found = []
    for kind in kinds:
        items = spec.get(kind) if isinstance(spec, Mapping) else None
        for index, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, Mapping):
                found.append(Container(kind, index, item))
    return found
