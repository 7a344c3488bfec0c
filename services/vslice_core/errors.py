"""The errors vslice raises, one hierarchy for every part.

    VsliceError
    ├── InvalidRequest      a request, manifest, annotation or file that vslice cannot accept;
    │                       the message names the field and the value
    │   └── DecodeError     a vslice annotation read back is malformed or of a foreign version
    ├── NoFit               a valid request no node can take now; ``.reasons`` says why, per node
    ├── ClusterError        the cluster refused or failed a call; ``.status``: the parsed Status
    └── Timeout             waiting for a cluster state ran past its deadline

The SDK re-exports these as ``vslice.errors`` so users catch one set of names everywhere.
"""

from __future__ import annotations

from typing import Any


class VsliceError(Exception):
    """Base of every error vslice raises on purpose."""


class InvalidRequest(VsliceError, ValueError):
    """Input that vslice cannot accept. ``field`` and ``value`` name what was wrong."""

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class DecodeError(InvalidRequest):
    """A vslice annotation (or a HAMi one) that is malformed or of a version we do not read."""


class NoFit(VsliceError):
    """No node can take the request now. ``reasons`` maps node name to {reason code: count}."""

    def __init__(self, message: str, *, reasons: dict[str, dict[str, int]] | None = None) -> None:
        super().__init__(message)
        self.reasons: dict[str, dict[str, int]] = reasons or {}


class ClusterError(VsliceError):
    """The Kubernetes API refused or failed a call. ``status`` is the parsed Status, if any."""

    def __init__(
        self, message: str, *, status: dict[str, Any] | None = None, code: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class Timeout(VsliceError, TimeoutError):
    """A wait for a cluster state ran past its deadline."""


def one_line(message: object) -> str:
    """``message`` as one printable line: commands promise a single line on stderr."""
    text = str(message)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
