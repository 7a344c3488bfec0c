"""The errors users catch: ``vslice.errors.NoFit``, ``InvalidRequest``, ``ClusterError``, ...

The hierarchy is defined once in :mod:`vslice_core.errors` (the services raise the same
classes); this module re-exports it under the SDK's name.
"""

from vslice_core.errors import (
    ClusterError,
    DecodeError,
    InvalidRequest,
    NoFit,
    Timeout,
    VsliceError,
)

__all__ = ["ClusterError", "DecodeError", "InvalidRequest", "NoFit", "Timeout", "VsliceError"]
