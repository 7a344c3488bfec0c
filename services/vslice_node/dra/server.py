"""The DRA kubelet plugin's two unix sockets and their gRPC servers.

- the registration socket ``<plugins_registry>/<driver>-reg.sock``, where the kubelet's plugin
  watcher finds us (``pluginregistration.Registration``);
- the DRA socket, by default ``/var/lib/kubelet/plugins/<driver>/dra.sock``, the endpoint named
  in the registration, where the kubelet calls NodePrepareResources and NodeUnprepareResources.

Each socket gets its own gRPC server, so each serves only its own service. The DRA socket is
served before the registration socket appears, because the kubelet connects to the endpoint as
soon as it has read our PluginInfo; on stop the registration socket goes first (its removal is
what makes the kubelet deregister the driver). A socket file left by an earlier run is removed
before listening (a stale socket refuses connections), and both sockets are removed on stop.
grpcio does both for unix sockets too, but only as an implementation detail; doing it here keeps
it a property of the plugin, and a path held by something that is not a socket is refused with
a clear error instead of being bound over.

Nothing here reacts to a kubelet restart: the restarted kubelet finds the registration socket
again and registers the plugin anew (see :mod:`vslice_node.dra.registration`).
"""

from __future__ import annotations

import logging
import os
import stat
from concurrent import futures
from pathlib import Path
from types import TracebackType

import grpc

from vslice_node.dra.api import dra_pb2_grpc, pluginregistration_pb2_grpc
from vslice_node.dra.claims import ClaimPreparer
from vslice_node.dra.metrics import DraMetrics
from vslice_node.dra.registration import (
    DRIVER_NAME,
    SUPPORTED_VERSIONS,
    RegistrationServicer,
    RegistrationState,
)
from vslice_node.dra.servicer import DRAPluginServicer

log = logging.getLogger("vslice.draplugin.server")

DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DRA_SOCKET_NAME = "dra.sock"

# sun_path holds 108 bytes including the terminating NUL; a longer path fails to bind with an
# unhelpful message, so it is refused up front.
MAX_SOCKET_PATH = 107


def registration_socket_path(registry_dir: Path, driver_name: str = DRIVER_NAME) -> Path:
    # The name the upstream kubelet-plugin helper uses too; the watcher accepts any name that
    # does not start with ".".
    return registry_dir / f"{driver_name}-reg.sock"


def default_dra_socket(driver_name: str = DRIVER_NAME) -> Path:
    return DEFAULT_PLUGINS_DIR / driver_name / DRA_SOCKET_NAME


def remove_stale_socket(path: Path) -> bool:
    """Remove a socket file left at ``path``; True if there was one. Anything else that is not
    a socket is left alone and refused, since it is not ours to delete."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
    path.unlink()
    log.info("removed a stale socket", extra={"socket": str(path)})
    return True


class DRAPluginServer:
    """Serves the registration and DRA sockets for ``driver_name`` until :meth:`stop`."""

    def __init__(
        self,
        preparer: ClaimPreparer,
        *,
        driver_name: str = DRIVER_NAME,
        registry_dir: Path = DEFAULT_REGISTRY_DIR,
        dra_socket: Path | None = None,
        supported_versions: tuple[str, ...] = SUPPORTED_VERSIONS,
        max_workers: int = 8,
        metrics: DraMetrics | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.registration_socket = registration_socket_path(registry_dir, driver_name)
        self.dra_socket = dra_socket if dra_socket is not None else default_dra_socket(driver_name)
        for path in (self.registration_socket, self.dra_socket):
            if len(os.fsencode(path)) > MAX_SOCKET_PATH:
                raise ValueError(f"socket path longer than {MAX_SOCKET_PATH} bytes: {path}")
        self.state = RegistrationState()
        self.registration = RegistrationServicer(
            str(self.dra_socket),
            driver_name=driver_name,
            supported_versions=supported_versions,
            state=self.state,
        )
        self.dra = DRAPluginServicer(preparer, metrics)
        self.max_workers = max_workers
        self._dra_server: grpc.Server | None = None
        self._registration_server: grpc.Server | None = None

    @property
    def registered(self) -> bool:
        """Whether the kubelet's latest NotifyRegistrationStatus accepted the plugin."""
        return self.state.registered

    @property
    def serving(self) -> bool:
        return self._registration_server is not None

    def start(self) -> None:
        if self.serving:
            raise RuntimeError("already serving")
        try:
            self._dra_server = self._listen(self.dra_socket, "dra", self.max_workers)
            add_dra = dra_pb2_grpc.add_DRAPluginServicer_to_server
            add_dra(self.dra, self._dra_server)  # type: ignore[no-untyped-call]
            self._dra_server.start()
            self._registration_server = self._listen(self.registration_socket, "dra-reg", 2)
            add_reg = pluginregistration_pb2_grpc.add_RegistrationServicer_to_server
            add_reg(self.registration, self._registration_server)  # type: ignore[no-untyped-call]
            self._registration_server.start()
        except BaseException:
            self.stop()
            raise
        log.info(
            "serving",
            extra={
                "driver": self.driver_name,
                "registration_socket": str(self.registration_socket),
                "dra_socket": str(self.dra_socket),
            },
        )

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving and remove both sockets; safe to call more than once."""
        for attr, path in (
            ("_registration_server", self.registration_socket),
            ("_dra_server", self.dra_socket),
        ):
            server: grpc.Server | None = getattr(self, attr)
            setattr(self, attr, None)
            if server is not None:
                server.stop(grace=grace_s).wait(grace_s + 5)
            # Only a socket is removed, never a stranger's file at the same path.
            if path.is_socket():
                path.unlink(missing_ok=True)
        self.state.forget()

    def __enter__(self) -> DRAPluginServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @staticmethod
    def _listen(path: Path, name: str, workers: int) -> grpc.Server:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_socket(path)
        server = grpc.server(futures.ThreadPoolExecutor(workers, thread_name_prefix=name))
        if server.add_insecure_port(f"unix://{path}") == 0:
            raise OSError(f"cannot listen on {path}")
        return server
