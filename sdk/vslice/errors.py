"""The errors users catch: ``vslice.errors.NoFit``, ``InvalidRequest``, ``ClusterError``, ...

The hierarchy is defined once in :mod:`vslice_core.errors` (the services raise the same
classes); this module re-exports it under the SDK's name and adds the one error only the SDK's
waits raise::

    VsliceError
    ├── InvalidRequest
    │   └── DecodeError
    ├── NoFit
    ├── ClusterError
    │   └── Stalled     a waited-for pod cannot get there without a change (see below)
    └── Timeout
"""

from vslice_core.errors import (
    ClusterError,
    DecodeError,
    InvalidRequest,
    NoFit,
    Timeout,
    VsliceError,
)


class Stalled(ClusterError):
    """A pod a wait follows cannot progress until something changes: its image cannot be
    pulled, a container crash-loops or lacks a Secret, it is being deleted, or it runs on a
    node kwok simulates (it never completes there). Raised as soon as Kubernetes says so,
    not at the wait's deadline. ``reason`` is Kubernetes' word (``ImagePullBackOff``, ...,
    ``Simulated`` for a kwok node), ``pod`` is ``namespace/name``. A ClusterError, since the
    pod fails as far as the wait is concerned."""

    def __init__(self, message: str, *, reason: str, pod: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.pod = pod


__all__ = [
    "ClusterError",
    "DecodeError",
    "InvalidRequest",
    "NoFit",
    "Stalled",
    "Timeout",
    "VsliceError",
]
