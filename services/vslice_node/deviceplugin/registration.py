"""Registration with the kubelet, and noticing when the kubelet restarts.

The kubelet serves ``kubelet.sock`` in its device-plugins directory. When it restarts it deletes
every other file there (our socket included) and creates a new ``kubelet.sock``; its old
registrations are gone. :class:`KubeletWatch` notices either sign by polling, cheaply: a missing
plugin socket, or a ``kubelet.sock`` whose inode changed since we registered. The caller then
serves a fresh socket and registers again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from vslice_node.deviceplugin.api import deviceplugin_pb2 as pb
from vslice_node.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


class KubeletUnavailable(Exception):
    """Registration did not succeed; the message says why."""


def unix_target(path: Path) -> str:
    return f"unix://{path}"


def register(
    directory: Path,
    endpoint: str,
    resource_name: str,
    *,
    connect_timeout_s: float = 1.0,
    timeout_s: float = 5.0,
) -> None:
    """Register ``endpoint`` (a socket name inside ``directory``) for ``resource_name``.

    Raises :class:`KubeletUnavailable` when the kubelet does not answer or refuses.
    """
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource_name,
        options=pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        ),
    )
    with grpc.insecure_channel(unix_target(directory / KUBELET_SOCKET)) as channel:
        try:
            # A stale kubelet.sock refuses connections: give up soon and retry later.
            grpc.channel_ready_future(channel).result(timeout=connect_timeout_s)
            stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            stub.Register(request, timeout=timeout_s)
        except grpc.FutureTimeoutError as exc:
            raise KubeletUnavailable(
                f"kubelet socket does not accept connections (waited {connect_timeout_s:g} s)"
            ) from exc
        except grpc.RpcError as exc:
            detail = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.Call) else exc
            raise KubeletUnavailable(f"kubelet refused registration: {detail}") from exc


def inode(path: Path) -> int | None:
    """The file's inode, or None when it is not there."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


@dataclass
class KubeletWatch:
    """What we registered against, to tell when the kubelet has started over."""

    directory: Path
    endpoint: str
    kubelet_inode: int | None = None

    @property
    def kubelet_socket(self) -> Path:
        return self.directory / KUBELET_SOCKET

    @property
    def plugin_socket(self) -> Path:
        return self.directory / self.endpoint

    def remember_kubelet(self) -> None:
        self.kubelet_inode = inode(self.kubelet_socket)

    def kubelet_present(self) -> bool:
        return inode(self.kubelet_socket) is not None

    def restart_reason(self) -> str | None:
        """Why we must serve and register again, or None while all is as we left it."""
        if not self.plugin_socket.exists():
            return "plugin socket removed"
        current = inode(self.kubelet_socket)
        if current is None:
            return None  # the kubelet is down; its restart will also remove our socket
        if current != self.kubelet_inode:
            return "kubelet socket replaced"
        return None
