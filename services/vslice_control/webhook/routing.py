"""Which path a namespace's GPU pods take: the scheduler extender or DRA.

Precedence, first match wins (docs/webhook.md, "DRA path"):

1. the namespace's label ``vslice.io/path`` (``dra`` or ``extender``), read from the Namespace
   object when the webhook has API access: the namespace's administrator decides for it;
2. the ``dra_namespaces`` setting (the namespace is listed: ``dra``);
3. the ``path`` setting (cluster-wide default, ``extender`` unless set).

A label with another value is not guessed at: the settings decide and the pod's admission
carries a warning naming the label and the value, so a typo is seen at the next ``kubectl
apply`` instead of silently changing how pods are scheduled.

:class:`NamespaceLabels` is the list+watch handler that keeps the labels current (the same
shape as :class:`vslice_control.quota.limits.QuotaBook`); it holds no client, the watch feeds it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

PATH_LABEL = "vslice.io/path"
SchedulingPath = Literal["extender", "dra"]
PATHS: tuple[str, ...] = get_args(SchedulingPath)


@dataclass(frozen=True)
class Route:
    path: SchedulingPath
    warnings: tuple[str, ...] = ()


def choose_path(
    namespace: str,
    labels: Mapping[str, str] | None,
    default: SchedulingPath = "extender",
    dra_namespaces: Collection[str] = (),
) -> Route:
    """The path of ``namespace``'s GPU pods; ``labels`` are the Namespace's (None: not known)."""
    fallback: SchedulingPath = "dra" if namespace in dra_namespaces else default
    value = (labels or {}).get(PATH_LABEL)
    if value is None:
        return Route(fallback)
    if value == "dra":
        return Route("dra")
    if value == "extender":
        return Route("extender")
    return Route(
        fallback,
        (
            f"namespace {namespace!r} label {PATH_LABEL}={value!r} is neither "
            f"{' nor '.join(repr(p) for p in PATHS)}: the {fallback} path of the webhook's "
            "settings is used",
        ),
    )


class NamespaceLabels:
    """The labels of every namespace, kept current by a Namespace list+watch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._labels: dict[str, dict[str, str]] = {}

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        with self._lock:
            return self._labels.get(namespace)

    def replace(self, items: list[dict[str, Any]]) -> None:
        found = {_name(item): _labels(item) for item in items}
        with self._lock:
            self._labels = found

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if event == "DELETED":
                self._labels.pop(_name(obj), None)
            else:
                self._labels[_name(obj)] = _labels(obj)


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels")
    if not isinstance(labels, Mapping):
        return {}
    return {str(key): str(value) for key, value in labels.items()}
