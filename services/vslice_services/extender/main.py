"""``vslice serve scheduler``: the kube-scheduler extender over HTTP.

Routes (``urlPrefix`` is ``http://HOST:PORT``; verbs ``filter``, ``prioritize``, ``bind``):
``POST /filter``, ``POST /prioritize``, ``POST /bind``, ``GET /metrics``, ``GET /healthz``
(the process answers) and ``GET /readyz`` (200 once the ledger is loaded, 503 before).

Start-up: three list+watch threads (nodes, pods, resource quotas) fill the ledger from the
annotations; filter and bind answer "retry" until all three have listed once, so a restarted
extender never decides on a half-loaded ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from vslice_core.errors import InvalidRequest
from vslice_core.ledger import Ledger
from vslice_kube.binding import bind_pod, read_pod
from vslice_kube.coreapi import core_api
from vslice_kube.nodelock import Held, NodeLocker
from vslice_kube.nodestate import NodeState
from vslice_kube.watch import ListWatch

from vslice_services.extender.feed import Holds, NodeFeed, PodFeed
from vslice_services.extender.metrics import ExtenderMetrics
from vslice_services.extender.protocol import (
    encode_priorities,
    parse_binding_args,
    parse_extender_args,
)
from vslice_services.extender.verbs import Extender
from vslice_services.httpserve import (
    Handler,
    HttpService,
    Response,
    configure_logging,
    run_until_signal,
)
from vslice_services.quota import QuotaBook
from vslice_services.settings import SchedulerSettings, load_settings

_Args = TypeVar("_Args")
log = logging.getLogger("vslice.extender")


class ApiCluster:
    """The :class:`~vslice_services.extender.verbs.Cluster` calls, over the API server."""

    def __init__(self, api: Any, locker: NodeLocker) -> None:
        self._api = api
        self._node_state = NodeState(api)
        self._locker = locker

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return read_pod(self._api, namespace, name)

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return self._node_state.pods_on_node(node)

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        bind_pod(self._api, namespace, name, uid, node, annotations)

    def lock_node(self, node: str) -> Held:
        return self._locker.acquire(node)

    def unlock_node(self, held: Held) -> None:
        self._locker.release(held)


def _bad_request(verb: str, exc: InvalidRequest) -> Response:
    log.warning("malformed extender call", extra={"verb": verb, "error": str(exc)})
    return Response.text(f"malformed {verb} call: {exc}", 400)


def _verb(name: str, parse: Callable[[bytes], _Args], answer: Callable[[_Args], Any]) -> Handler:
    """A verb's route: parse the body (a malformed one is a 400 naming the problem), answer."""

    def handle(body: bytes) -> Response:
        try:
            args = parse(body)
        except InvalidRequest as exc:
            return _bad_request(name, exc)
        return Response.json(answer(args))

    return handle


def routes(
    extender: Extender, metrics: ExtenderMetrics, ready: Callable[[], bool]
) -> dict[tuple[str, str], Handler]:
    """The HTTP routes: thin wrappers that parse, call a verb, encode."""

    def metrics_(_: bytes) -> Response:
        return Response(200, metrics.exposition(), "text/plain; version=0.0.4; charset=utf-8")

    def readyz(_: bytes) -> Response:
        return Response.text("ok") if ready() else Response.text("loading", 503)

    return {
        ("POST", "/filter"): _verb("filter", parse_extender_args, extender.filter),
        ("POST", "/prioritize"): _verb(
            "prioritize", parse_extender_args, lambda a: encode_priorities(extender.prioritize(a))
        ),
        ("POST", "/bind"): _verb("bind", parse_binding_args, extender.bind),
        ("GET", "/metrics"): metrics_,
        ("GET", "/readyz"): readyz,
    }


def serve(config_path: str | None = None) -> int:
    settings = load_settings(SchedulerSettings, config_path)
    configure_logging("scheduler", settings.log_level)
    api = core_api(settings.kubeconfig)
    ledger = Ledger()
    holds = Holds(settings.hold_ttl_seconds)
    resync = settings.resync_seconds
    watches = [
        ListWatch("nodes", api.list_node, NodeFeed(ledger), resync_seconds=resync),
        ListWatch(
            "pods", api.list_pod_for_all_namespaces, PodFeed(ledger, holds), resync_seconds=resync
        ),
        ListWatch(
            "resourcequotas",
            api.list_resource_quota_for_all_namespaces,
            QuotaBook(settings.resources, ledger.set_quota),
            resync_seconds=resync,
        ),
    ]

    def synced() -> bool:
        return all(watch.synced for watch in watches)

    locker = NodeLocker(
        api,
        settings.identity,
        ttl_seconds=settings.lock_ttl_seconds,
        wait_seconds=settings.lock_wait_seconds,
    )
    metrics = ExtenderMetrics(ledger)
    extender = Extender(
        ledger, holds, ApiCluster(api, locker), metrics, names=settings.resources, synced=synced
    )
    service = HttpService(settings.listen_address, routes(extender, metrics, synced))
    for watch in watches:
        watch.start()
    log.info(
        "serving",
        extra={"listen": settings.listen, "port": service.port, "identity": settings.identity},
    )
    return run_until_signal([service], [watch.stop for watch in watches])
