"""What the DRA kubelet plugin passes to the logic that prepares claims, and what it gets back.

Plain values with no gRPC or protobuf in them, so the logic that decides what a claim gets can be
written and tested without the wire layer. :mod:`vslice_node.dra.servicer` translates
between these and the kubelet's messages.

Results are keyed by claim UID, as on the wire. A claim in the request that is missing from the
result counts as not done: the kubelet asks for it again later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ClaimRef:
    """One ResourceClaim the kubelet names in a call."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True)
class PreparedDevice:
    """One allocated device the kubelet must make available to the claim's containers."""

    # The claim's requests this device serves; empty means all of them.
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    # Fully qualified CDI device names ("vendor/class=name"); may be empty.
    cdi_device_ids: tuple[str, ...]
    # The allocation's share ID, only for a device handed out as one share among several
    # (consumable capacity); None leaves the field unset on the wire.
    share_id: str | None = None


@dataclass(frozen=True)
class Prepared:
    """A claim that is ready: the devices it got (possibly none)."""

    devices: tuple[PreparedDevice, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ClaimError:
    """A claim that could not be (un)prepared; the kubelet shows the message and retries."""

    message: str


class ClaimPreparer(Protocol):
    """The node's claim logic, called by the gRPC servicer for each kubelet request.

    Both methods get every claim of one call and answer per claim UID. A failure that concerns
    one claim is returned as its :class:`ClaimError` (or raised while handling that claim: the
    servicer then turns it into that claim's error, see below); raising from the call as a whole
    fails every claim of the call with a gRPC error status and the kubelet retries them all.

    Both are called again for a claim the kubelet is not sure about (after its restart, after a
    timeout), so they must be idempotent: preparing a prepared claim answers the same devices,
    unpreparing an unknown claim is a success.
    """

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, Prepared | ClaimError]:
        """Make each claim's devices ready; the result is keyed by claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimError | None]:
        """Undo :meth:`prepare`; None for a claim means done. Keyed by claim UID."""
        ...
