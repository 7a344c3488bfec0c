"""The plugin's endpoint: a gRPC server on a unix socket, registered with the kubelet, served
again and re-registered whenever the kubelet starts over.

One background thread runs the cycle ``serve -> register -> watch``:

- serve: remove a stale socket file, start a gRPC server on ``<dir>/<endpoint>``;
- register: wait for ``kubelet.sock``, call Register, retry with capped backoff on failure;
  without a kubelet the plugin keeps serving and keeps waiting ("waiting for kubelet");
- watch: poll every ``poll_s`` for our socket disappearing or ``kubelet.sock`` being replaced,
  then stop the server and start the cycle over.

The thread never dies on an error: every failure is logged and retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from vslice_node.deviceplugin.registration import (
    KubeletUnavailable,
    KubeletWatch,
    register,
    unix_target,
)

log = logging.getLogger("vslice.deviceplugin.endpoint")

MAX_BACKOFF_S = 5.0


@dataclass
class EndpointStatus:
    """What ``/status`` reports about the kubelet link; guarded by its own lock."""

    state: str = "starting"
    registrations: int = 0
    last_registered_at: float | None = None
    last_error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def set(self, state: str, error: str = "") -> None:
        with self._lock:
            self.state = state
            if error:
                self.last_error = error

    def registered(self) -> None:
        with self._lock:
            self.state = "registered"
            self.registrations += 1
            self.last_registered_at = time.time()

    @property
    def is_registered(self) -> bool:
        """Whether the last Register call succeeded and no restart has been noticed since."""
        with self._lock:
            return self.state == "registered"

    def as_dict(self) -> dict[str, object]:
        with self._lock:
            return {
                "state": self.state,
                "registrations": self.registrations,
                "last_registered_at": self.last_registered_at,
                "last_error": self.last_error,
            }


class PluginEndpoint:
    """Serves ``add_servicer``'s services on the plugin socket and keeps it registered."""

    def __init__(
        self,
        directory: Path,
        endpoint: str,
        resource_name: str,
        add_servicer: Callable[[grpc.Server], None],
        *,
        poll_s: float = 0.25,
    ) -> None:
        self.watch = KubeletWatch(directory, endpoint)
        self.resource_name = resource_name
        self.add_servicer = add_servicer
        self.poll_s = poll_s
        self.status = EndpointStatus()
        self._stop = threading.Event()
        self._server: grpc.Server | None = None
        self._thread = threading.Thread(target=self._run, name="kubelet-link", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._stop_server()
        self.watch.plugin_socket.unlink(missing_ok=True)

    @property
    def serving(self) -> bool:
        return self._server is not None

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                self._cycle()
                delay = 1.0
            except Exception as exc:  # never let the link die; log and start over
                log.exception("device plugin endpoint failed; starting over")
                self.status.set("error", f"{type(exc).__name__}: {exc}")
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)  # a lasting fault (no directory) logs rarely
            finally:
                self._stop_server()

    def _cycle(self) -> None:
        self._serve()
        if self._register_until_done():
            reason = self._watch_until_restart()
            if reason:
                log.info("kubelet restart noticed; serving again", extra={"reason": reason})

    def _serve(self) -> None:
        directory = self.watch.directory
        directory.mkdir(parents=True, exist_ok=True)
        self.watch.plugin_socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="dp"))
        self.add_servicer(server)
        if server.add_insecure_port(unix_target(self.watch.plugin_socket)) == 0:
            raise OSError(f"cannot listen on {self.watch.plugin_socket}")
        server.start()
        self._server = server
        log.info("serving", extra={"socket": str(self.watch.plugin_socket)})

    def _register_until_done(self) -> bool:
        """Register; False if we must start over first (stopped, or our socket vanished)."""
        backoff = 0.2
        while not self._stop.is_set():
            if not self.watch.plugin_socket.exists():
                return False
            if not self.watch.kubelet_present():
                if self.status.state != "waiting for kubelet":
                    log.info(
                        "waiting for the kubelet", extra={"socket": str(self.watch.kubelet_socket)}
                    )
                self.status.set("waiting for kubelet")
                self._stop.wait(0.1)
                continue
            self.watch.remember_kubelet()
            try:
                register(self.watch.directory, self.watch.endpoint, self.resource_name)
            except KubeletUnavailable as exc:
                message = str(exc)
                log.warning(message, extra={"retry_in_s": backoff})
                self.status.set("waiting for kubelet", message)
                self._wait_unless_changed(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self.status.registered()
            log.info(
                "registered with the kubelet",
                extra={"resource": self.resource_name, "endpoint": self.watch.endpoint},
            )
            return True
        return False

    def _wait_unless_changed(self, seconds: float) -> None:
        """Sleep out a backoff, but wake at once when the kubelet starts over (its restart
        removes our socket or replaces its own), so a long backoff never delays re-serving."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._stop.wait(self.poll_s):
            if self.watch.restart_reason():
                return

    def _watch_until_restart(self) -> str | None:
        while not self._stop.wait(self.poll_s):
            reason = self.watch.restart_reason()
            if reason:
                return reason
        return None

    def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=0).wait(5)
