"""Registration with the kubelet's plugin watcher.

The kubelet watches its ``plugins_registry`` directory. For each socket it finds there it calls
``GetInfo``, checks the answer with the handler for the plugin's ``type`` (for "DRAPlugin": the
driver name and the services in ``supported_versions``), connects to ``endpoint`` and then calls
``NotifyRegistrationStatus`` with its verdict. The plugin only answers; it never dials the
kubelet.

After a kubelet restart the watcher walks the directory again, finds our socket (the kubelet
does not delete files there, unlike the device-plugins directory) and registers us anew, so the
plugin needs no restart logic of its own: it keeps both sockets served. When the plugin stops,
removing the registration socket is what tells the kubelet to deregister it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from vslice_node.dra.api import pluginregistration_pb2 as pb
from vslice_node.dra.api import pluginregistration_pb2_grpc as pb_grpc

log = logging.getLogger("vslice.draplugin.registration")

DRIVER_NAME = "gpu.vslice.io"

# PluginInfo.type that selects the kubelet's DRA handler (the DRAPlugin constant in the kubelet
# module, pkg/apis/pluginregistration/v1/constants.go).
PLUGIN_TYPE = "DRAPlugin"

# The gRPC services this plugin serves, as "<version>.<service>". The kubelet chooses the first
# entry it knows from its own list, servicesSupportedByKubelet in the Kubernetes module's
# pkg/kubelet/cm/dra/plugin/dra_plugin.go: "v1.DRAPlugin" and "v1beta1.DRAPlugin" (the values
# of DRAPluginService in the kubelet module's pkg/apis/dra/v1/types.go and v1beta1/types.go).
# The kubelet refuses an empty list or one with none of its entries. Only v1 is served here.
SUPPORTED_VERSIONS: tuple[str, ...] = ("v1.DRAPlugin",)


@dataclass
class RegistrationState:
    """The kubelet's latest verdict; guarded by its own lock, waited on through an event."""

    registered: bool = False
    error: str = ""
    notifications: int = 0
    last_notified_at: float | None = None
    info_requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _changed: threading.Condition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)

    def asked_for_info(self) -> None:
        with self._lock:
            self.info_requests += 1

    def notified(self, registered: bool, error: str) -> None:
        with self._changed:
            self.registered = registered
            self.error = error
            self.notifications += 1
            self.last_notified_at = time.time()
            self._changed.notify_all()

    def forget(self) -> None:
        """Back to "not registered" (the plugin stopped serving)."""
        with self._changed:
            self.registered = False
            self._changed.notify_all()

    def wait_for_notification(self, after: int, timeout_s: float) -> bool:
        """Whether a notification beyond the ``after``-th one arrived within ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(lambda: self.notifications > after, timeout_s)

    def as_dict(self) -> dict[str, object]:
        with self._lock:
            return {
                "registered": self.registered,
                "error": self.error,
                "notifications": self.notifications,
                "last_notified_at": self.last_notified_at,
                "info_requests": self.info_requests,
            }


class RegistrationServicer(pb_grpc.RegistrationServicer):
    """``pluginregistration.Registration``: who we are, and the kubelet's answer to it."""

    def __init__(
        self,
        endpoint: str,
        *,
        driver_name: str = DRIVER_NAME,
        supported_versions: Sequence[str] = SUPPORTED_VERSIONS,
        state: RegistrationState | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.driver_name = driver_name
        self.supported_versions = tuple(supported_versions)
        self.state = state if state is not None else RegistrationState()

    def GetInfo(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.PluginInfo:
        self.state.asked_for_info()
        log.info(
            "kubelet asked for plugin info",
            extra={"driver": self.driver_name, "endpoint": self.endpoint},
        )
        return pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=self.endpoint,
            supported_versions=list(self.supported_versions),
        )

    def NotifyRegistrationStatus(
        self, request: pb.RegistrationStatus, context: grpc.ServicerContext
    ) -> pb.RegistrationStatusResponse:
        self.state.notified(request.plugin_registered, request.error)
        if request.plugin_registered:
            log.info("registered with the kubelet", extra={"driver": self.driver_name})
        else:
            # The kubelet will not call us; its message says why (e.g. an unknown service name).
            log.error(
                "the kubelet refused the registration",
                extra={"driver": self.driver_name, "error": request.error},
            )
        return pb.RegistrationStatusResponse()
