"""``vslice serve scheduler``: the kube-scheduler extender over HTTP.

Routes (``urlPrefix`` is ``http(s)://HOST:PORT``; verbs ``filter``, ``prioritize``, ``bind``):
``POST /filter``, ``POST /prioritize``, ``POST /bind``, ``GET /metrics``, ``GET /healthz``
(the process answers), ``GET /readyz`` (200 once the ledger is loaded, 503 before) and
``GET /status`` (what is wrong with the cluster's state now: over-booked GPUs, blocked nodes,
refused GPUs, unproven allocations). With ``client_ca_file`` the three verbs answer only a
client certificate whose CN is in ``client_names`` (kube-scheduler's); the GET routes stay
open to probes and scrapers.

Start-up: five list+watch threads fill the ledger: nodes, pods (from the annotations),
resource quotas, and ResourceClaims with vslice's ResourceSlices (what the namespace's DRA
claims hold counts against its quota as the claims' own check counts its pods:
``quota.limits.QuotaTotals``). Filter and bind answer "retry" until all have listed once, so a
restarted extender never decides on a half-loaded ledger.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from vslice_core.errors import InvalidRequest
from vslice_core.ledger import Ledger
from vslice_kube.binding import bind_pod, evict_pod, list_bound_pods, read_pod
from vslice_kube.coreapi import core_api
from vslice_kube.dra import DraApi
from vslice_kube.events import EventRecorder, Subject
from vslice_kube.lease import LeaderLease, LeaseTiming
from vslice_kube.nodelock import Held, NodeLocker
from vslice_kube.nodestate import NodeState
from vslice_kube.resourceapi import claim_watches
from vslice_kube.watch import ListWatch
from vslice_serving.httpserve import (
    ClientAuth,
    Handler,
    HttpService,
    ReloadingTlsContext,
    Response,
    configure_logging,
    run_until_signal,
)
from vslice_serving.settings import (
    LEASE_BIND_TIMEOUT_SECONDS,
    LEASE_MARGIN_SECONDS,
    SchedulerSettings,
    load_settings,
)

from vslice_control.extender.drapreemptor import DraPreemptor
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.leadership import LeaderGate
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.preemptor import Preemptor
from vslice_control.extender.protocol import (
    encode_priorities,
    parse_binding_args,
    parse_extender_args,
)
from vslice_control.extender.trust import Proofs, Reports
from vslice_control.extender.verbs import Extender
from vslice_control.quota.claims import ClaimLedger
from vslice_control.quota.limits import QuotaBook, QuotaTotals

_Args = TypeVar("_Args")
log = logging.getLogger("vslice.extender")


class ApiCluster:
    """The :class:`~vslice_control.extender.verbs.Cluster` calls, over the API server."""

    def __init__(self, api: Any, locker: NodeLocker, bind_timeout_s: float = 10.0) -> None:
        self._api = api
        self._node_state = NodeState(api)
        self._locker = locker
        self._bind_timeout = bind_timeout_s

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return read_pod(self._api, namespace, name)

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return self._node_state.pods_on_node(node)

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        bind_pod(self._api, namespace, name, uid, node, annotations, timeout_s=self._bind_timeout)

    def evict_pod(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> None:
        evict_pod(self._api, namespace, name, uid, dry_run=dry_run)

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


VERBS = frozenset({("POST", "/filter"), ("POST", "/prioritize"), ("POST", "/bind")})


class ApiEvents:
    """:class:`~vslice_control.extender.trust.Events` over the API server."""

    def __init__(self, recorder: EventRecorder) -> None:
        self._recorder = recorder

    def pod(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self._recorder.warn(Subject.pod(namespace, name, uid), reason, message)

    def node(self, name: str, reason: str, message: str) -> None:
        self._recorder.warn(Subject.node(name), reason, message)


def status(extender: Extender, nodes: NodeFeed) -> dict[str, Any]:
    """``GET /status``: the state problems that exist now (empty mappings when none)."""
    ledger = extender.ledger
    return {
        "overbooked": {
            node: {uuid: usage.model_dump() for uuid, usage in gpus.items()}
            for node, gpus in ledger.overbooked().items()
        },
        "blocked_nodes": ledger.blocked_nodes(),
        "refused_gpus": nodes.refused(),
        "unproven_pods": {
            uid: allocation.node
            for uid in ledger.pod_uids()
            if (allocation := ledger.unproven(uid)) is not None
        },
    }


def routes(
    extender: Extender,
    metrics: ExtenderMetrics,
    ready: Callable[[], bool],
    nodes: NodeFeed | None = None,
    standby: Callable[[], bool] | None = None,
) -> dict[tuple[str, str], Handler]:
    """The HTTP routes: thin wrappers that parse, call a verb, encode."""
    node_feed = nodes or NodeFeed(extender.ledger)
    # The state gauges read what /readyz reads, so a scrape and a probe never disagree.
    metrics.follow(ready, (lambda: not standby()) if standby is not None else (lambda: True))

    def metrics_(_: bytes) -> Response:
        return Response(200, metrics.exposition(), "text/plain; version=0.0.4; charset=utf-8")

    def readyz(_: bytes) -> Response:
        if not ready():
            return Response.text("loading", 503)
        if standby is not None and standby():
            # With leader election only the active replica is ready, so a Service in
            # front of the replicas sends the scheduler to the one that binds.
            return Response.text("standby: another replica holds the lease", 503)
        return Response.text("ok")

    return {
        ("POST", "/filter"): _verb("filter", parse_extender_args, extender.filter),
        ("POST", "/prioritize"): _verb(
            "prioritize", parse_extender_args, lambda a: encode_priorities(extender.prioritize(a))
        ),
        ("POST", "/bind"): _verb("bind", parse_binding_args, extender.bind),
        ("GET", "/metrics"): metrics_,
        ("GET", "/readyz"): readyz,
        ("GET", "/status"): lambda _: Response.json(status(extender, node_feed)),
    }


def _sweeping(extender: Extender, stop: threading.Event, every: float) -> threading.Thread:
    """Holds expire on a timer too, not only when the next filter comes."""

    def run() -> None:
        while not stop.wait(every):
            try:
                extender.sweep_holds()
            except Exception:  # the timer must outlive any one failure
                log.exception("hold sweep failed")

    thread = threading.Thread(target=run, name="hold-sweep", daemon=True)
    thread.start()
    return thread


def _tls(settings: SchedulerSettings) -> tuple[ReloadingTlsContext | None, ClientAuth | None]:
    if not settings.tls_cert_file:
        return None, None
    tls = ReloadingTlsContext(
        settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file
    )
    tls.current()  # a missing or broken file fails the start, naming it
    if not settings.client_ca_file:
        return tls, None
    return tls, ClientAuth(frozenset(settings.client_names), VERBS)


def _leadership(
    settings: SchedulerSettings, api: Any, pods: PodFeed
) -> tuple[LeaderLease | None, LeaderGate | None]:
    """The Lease and its gate when leader election is on; (None, None) for node locks."""
    if not settings.leader_election:
        return None, None
    timing = LeaseTiming(
        lease_seconds=settings.lease_seconds,
        renew_seconds=settings.lease_renew_seconds,
        margin_seconds=LEASE_MARGIN_SECONDS,
    )
    lease = LeaderLease.beside(
        api, settings.lease_namespace, settings.lease_name, settings.identity, timing
    )

    def catch_up_all() -> None:
        # Recorded exactly as the pod watch would (proofs checked, unreadable values block).
        pods.catch_up(list_bound_pods(api))

    gate = LeaderGate(lease, catch_up_all, settings.identity)

    def won(active: bool) -> None:
        if active:  # off the renew thread: a long re-read must not delay the next renew
            threading.Thread(target=_prepare, args=(gate,), name="catch-up", daemon=True).start()

    lease.on_change(won)
    return lease, gate


def _prepare(gate: LeaderGate) -> None:
    try:
        gate.prepare()
    except Exception:  # the term's first bind catches up instead
        log.exception("catch-up after winning the lease failed")


def _freeze_when_loaded(watches: list[ListWatch]) -> threading.Thread:
    """Once every watch has listed, move what the process holds out of the GC's generations.

    The loaded ledger is hundreds of thousands of long-lived objects that every full
    collection would walk again (passes of 440-520 ms were seen at 20,000 nodes, pausing every
    answer). ``gc.freeze`` puts them in the permanent generation: later passes look only at
    what was allocated after the load, and a frozen object is still freed by its reference
    count when the ledger lets it go. Collected first, so no garbage cycle is frozen with them.
    """

    def run() -> None:
        for watch in watches:
            watch.wait_synced()
        gc.collect()
        gc.freeze()
        log.info("start-up state frozen", extra={"frozen_objects": gc.get_freeze_count()})

    thread = threading.Thread(target=run, name="gc-freeze", daemon=True)
    thread.start()
    return thread


def serve(config_path: str | None = None) -> int:
    settings = load_settings(SchedulerSettings, config_path)
    configure_logging("scheduler", settings.log_level)
    proofs = Proofs.from_file(settings.allocation_key_file)
    tls, client_auth = _tls(settings)
    api = core_api(settings.kubeconfig)
    ledger = Ledger()
    holds = Holds(settings.hold_ttl_seconds)
    resync = settings.resync_seconds
    metrics = ExtenderMetrics(ledger, hami=settings.hami_metrics)
    recorder = EventRecorder(api, "vslice-scheduler")
    reports = Reports(ApiEvents(recorder), metrics)
    node_feed = NodeFeed(ledger, reports)
    metrics.count_refused(node_feed.refused)
    pod_feed = PodFeed(ledger, holds, proofs, reports)
    totals = QuotaTotals(ledger.set_quota)
    claims = ClaimLedger(on_change=totals.claims_changed)
    metrics.name_pods(pod_feed.names)
    watches = [
        ListWatch("nodes", api.list_node, node_feed, resync_seconds=resync),
        ListWatch("pods", api.list_pod_for_all_namespaces, pod_feed, resync_seconds=resync),
        ListWatch(
            "resourcequotas",
            api.list_resource_quota_for_all_namespaces,
            QuotaBook(settings.resources, totals.limits_changed),
            resync_seconds=resync,
        ),
        *claim_watches(settings.kubeconfig, claims, claims.cards, resync_seconds=resync),
    ]

    def synced() -> bool:
        return all(watch.synced for watch in watches)

    locker = NodeLocker(
        api,
        settings.identity,
        ttl_seconds=settings.lock_ttl_seconds,
        wait_seconds=settings.lock_wait_seconds,
    )
    lease, gates = _leadership(settings, api, pod_feed)
    bind_timeout = LEASE_BIND_TIMEOUT_SECONDS if lease is not None else 10.0
    cluster = ApiCluster(api, locker, bind_timeout)
    preemptor = (
        Preemptor(ledger, pod_feed, cluster, ApiEvents(recorder)) if settings.preemption else None
    )
    extender = Extender(
        ledger,
        holds,
        cluster,
        metrics,
        names=settings.resources,
        synced=synced,
        proofs=proofs,
        pods=pod_feed,
        unknown_pod_grace=settings.unknown_pod_hold_seconds,
        gates=gates,
        preemptor=preemptor,
    )
    standby = None if lease is None else (lambda: not lease.active())
    service = HttpService(
        settings.listen_address,
        routes(extender, metrics, synced, node_feed, standby),
        tls=tls,
        client_auth=client_auth,
    )
    for watch in watches:
        watch.start()
    _freeze_when_loaded(watches)
    if lease is not None:
        lease.start()
    dra_preemptor = None
    if settings.preemption:
        # Only the replica holding the Lease evicts (with node locks, every replica: they
        # choose the same victims from the same objects).
        dra_preemptor = DraPreemptor(
            pod_feed.claim_waiters,
            DraApi.connect(settings.kubeconfig),
            cluster,
            ApiEvents(recorder),
            active=(lambda: lease.active()) if lease is not None else (lambda: True),
        )
        dra_preemptor.start()
    stop_sweeping = threading.Event()
    _sweeping(extender, stop_sweeping, min(1.0, settings.unknown_pod_hold_seconds / 2))
    log.info(
        "serving",
        extra={
            "listen": settings.listen,
            "port": service.port,
            "identity": settings.identity,
            "https": tls is not None,
            "client_certificates": client_auth is not None,
            "allocation_proofs": proofs.enabled,
            "leader_election": lease is not None,
        },
    )
    cleanups = [stop_sweeping.set, *(watch.stop for watch in watches), recorder.stop]
    if dra_preemptor is not None:
        cleanups.insert(0, dra_preemptor.stop)
    if lease is not None:
        cleanups.insert(0, lease.stop)  # stop binding and give the Lease up first
    return run_until_signal([service], cleanups)
