"""The extender's three verbs over the ledger: filter, prioritize, bind.

**Filter** answers with the one node the engine picks (node policy binpack or spread decides,
not the scheduler's own scoring) and *holds* the chosen slices in the ledger at once, so the
next pod's filter, which the scheduler may run before this pod's bind, already sees them.
When nothing fits, every node gets its reasons (``"vslice: insufficient_memory x2"``) as
unresolvable: kube-scheduler's own preemption cannot see which pods hold GPU memory, so it
must not run; the :class:`~vslice_control.extender.preemptor.Preemptor` evicts lower-priority
slices instead, and holds the freed node for the pod (docs/preemption.md).

**Bind** enters the node's gate (the node lock, shared with other replicas through the node
annotation; when it comes from another holder, the allocations the API server shows on that
node *now* are merged into the ledger first), re-checks and records this pod's slices, and
creates the Binding carrying the ``vslice.io/allocation`` annotation and its proof
(``vslice.io/allocation-proof``, when the extender has keys): the API server sets node and
annotations in one write, so a pod is never bound without its allocation nor annotated
without being bound. Any failure releases the slices, and the scheduler retries the pod.

**Holds** a filter made are swept at every filter and by a timer in ``main``
(:meth:`Extender.sweep_holds`): after ``hold_ttl_seconds`` without a bind, or after a few
seconds when the pod watch does not show the pod at all.

Binds of this replica to one node run side by side under one hold of that node's lock
(:mod:`~vslice_control.extender.nodegate`); the ledger books each of them atomically. Lock
order: the node gate's condition, never held across an API call; the ledger's own lock,
taken inside each ledger call only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from vslice_core.annotations import (
    ALLOCATION,
    BIND_TIME,
    decode_allocation,
    encode_allocation,
    encode_bind_time,
)
from vslice_core.errors import ClusterError, DecodeError, InvalidRequest, NoFit
from vslice_core.ledger import Ledger
from vslice_core.model import Allocation, PodRequest
from vslice_core.requests import NormalizedPod, normalize_pod
from vslice_core.resources import ResourceNames
from vslice_kube.nodelock import Held, LockBusy

from vslice_control.extender.feed import PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.leadership import NotActive
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.nodegate import NodeGates
from vslice_control.extender.preemptor import Preemptor, pod_priority
from vslice_control.extender.protocol import (
    MAX_SCORE,
    BindingArgs,
    ExtenderArgs,
    encode_filter,
    summarize_reasons,
)
from vslice_control.extender.trust import Proofs

log = logging.getLogger("vslice.extender")


class Cluster(Protocol):
    """The API calls a bind needs (implemented over vslice_kube in ``main``)."""

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def pods_on_node(self, node: str) -> list[dict[str, Any]]: ...

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        """Bind the pod and set its annotations in one write; ClusterError 409 when the pod
        is already bound or was replaced."""
        ...

    def lock_node(self, node: str) -> Held:
        """Take the node lock (shared with other replicas); raises ClusterError."""
        ...

    def unlock_node(self, held: Held) -> None: ...


class Gates(Protocol):
    """Who may bind to a node now: node locks (:class:`NodeGates`) or the Lease
    (:class:`vslice_control.extender.leadership.LeaderGate`)."""

    def entered(self, node: str, catch_up: Callable[[], None]) -> AbstractContextManager[None]: ...


class BindFailed(Exception):
    """A bind that must be answered with an error (the scheduler then retries the pod)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class Extender:
    def __init__(
        self,
        ledger: Ledger,
        holds: Holds,
        cluster: Cluster | None,
        metrics: ExtenderMetrics,
        *,
        names: ResourceNames,
        synced: Callable[[], bool] = lambda: True,
        proofs: Proofs | None = None,
        pods: PodFeed | None = None,
        unknown_pod_grace: float = 5.0,
        gates: Gates | None = None,
        preemptor: Preemptor | None = None,
    ) -> None:
        """``pods``: the pod watch's handler, which says which pods exist (holds for others
        are dropped after ``unknown_pod_grace`` seconds) and records what a bind reads back
        from the API server the same way the watch does; without it, existence is not
        checked."""
        self.ledger = ledger
        self.holds = holds
        self._cluster = cluster
        self._metrics = metrics
        self._names = names
        self._synced = synced
        self._proofs = proofs or Proofs()
        self._feed = pods or PodFeed(ledger, holds, self._proofs)
        self._exists: Callable[[str], bool] = pods.exists if pods else (lambda _uid: True)
        self._grace = unknown_pod_grace
        # Without a Lease (gates=None), replicas bind side by side under node locks.
        default: Gates | None = NodeGates(cluster) if cluster is not None else None
        self._gates = gates or default
        self._preemptor = preemptor  # None: no preemption (no cluster access, or turned off)

    # ----- filter ------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            return self._filter(args)
        finally:
            self._metrics.filter_seconds.observe(time.perf_counter() - started)

    def _filter(self, args: ExtenderArgs) -> dict[str, Any]:
        if not self._synced():
            self._metrics.decided("filter", "failed", "not_synced")
            return encode_filter(
                args, [], error="vslice: ledger still loading from the cluster, retry"
            )
        self.sweep_holds()
        try:
            normalized = normalize_pod(args.pod, self._names)
        except InvalidRequest as exc:
            self._metrics.decided("filter", "invalid", str(exc.field or "pod"))
            log.warning("pod request invalid", extra={"pod": args.pod_key, "error": str(exc)})
            return encode_filter(
                args, [], unresolvable=dict.fromkeys(args.node_names, f"vslice: {exc}")
            )
        request = normalized.request
        if not request.wants_gpus:
            self._metrics.decided("filter", "fit", "no_gpu_request")
            return encode_filter(args, list(args.node_names))
        self._forget(request.uid)
        if normalized.count_only:
            # kube-scheduler calls the extender only with nodes its own filters passed. A
            # vslice node with no GPU on this path (all on DRA) passed them for a pod asking
            # whole GPUs by count alone only because a DeviceClass maps the name and the DRA
            # plugin found the GPUs: such nodes serve the pod through DRA, and are preferred,
            # as the pod's namespace chose DRA by leaving the name. A node without vslice's
            # node agent is never passed: its GPUs would come without the shim.
            by_dra = [name for name in args.node_names if self.ledger.gpu_count(name) == 0]
            if by_dra:
                self._metrics.decided("filter", "fit", "dra_extended_resource")
                return encode_filter(args, by_dra)
        names, held = list(args.node_names), {}
        if self._preemptor is not None:
            # Nodes whose evicted pods are leaving for a preemptor of at least this priority
            # are its: the room freed there goes to the pod it was freed for.
            held = self._preemptor.held_for_others(request.uid, pod_priority(args.pod)[0])
            if held:
                names = [name for name in names if name not in held]
        for _ in range(3):  # another thread may take the chosen slices between decide and hold
            decision = self.ledger.decide(request, names)
            if decision.node is None or decision.allocation is None:
                return self._no_fit(args, decision.nodes, request, names, held)
            # Hold first: a pod event seen meanwhile must not release what is being booked.
            self.holds.hold(request.uid, decision.node, request)
            try:
                self.ledger.try_commit(request.uid, decision.allocation, request.namespace)
            except NoFit:
                self.holds.drop(request.uid)
                continue
            self._metrics.decided("filter", "fit")
            return encode_filter(args, [decision.node])
        self._metrics.decided("filter", "failed", "contended")
        return encode_filter(args, [], error="vslice: capacity changed while deciding, retry")

    def _no_fit(
        self,
        args: ExtenderArgs,
        verdicts: dict[str, Any],
        request: PodRequest,
        names: list[str],
        held: dict[str, str],
    ) -> dict[str, Any]:
        reasons = {
            name: f"vslice: {summarize_reasons(v.reasons) or 'does not fit'}"
            for name, v in verdicts.items()
        }
        reasons |= {name: f"vslice: {why}" for name, why in held.items()}
        if self._preemptor is not None:
            outcome = self._preemptor.attempt(args.pod, request, names)
            if outcome is not None and outcome.node is not None:
                reasons[outcome.node] = f"vslice: {outcome.reason}"
            elif outcome is not None:
                reasons = {name: f"{why}; {outcome.reason}" for name, why in reasons.items()}
        first = next((next(iter(v.reasons), "") for v in verdicts.values() if v.reasons), "")
        self._metrics.decided("filter", "nofit", first)
        log.info(
            "no node fits",
            extra={"pod": args.pod_key, "nodes": len(verdicts), "first_reason": first},
        )
        return encode_filter(args, [], unresolvable=reasons)

    def _forget(self, uid: str) -> None:
        """A pod being scheduled is not bound: what the ledger holds for it is moot."""
        self.holds.drop(uid)
        self.ledger.release(uid)

    def sweep_holds(self) -> None:
        """Free the holds whose bind never came, or whose pod does not exist."""
        for uid in self.holds.sweep(self._exists, self._grace):
            if self.ledger.release(uid) is not None:
                why = "no bind came" if self._exists(uid) else "the pod does not exist"
                self._metrics.decided(
                    "hold", "expired", "no_bind" if self._exists(uid) else "no_pod"
                )
                log.info("hold dropped", extra={"uid": uid, "why": why})

    # ----- prioritize --------------------------------------------------------------------
    def prioritize(self, args: ExtenderArgs) -> dict[str, int]:
        """Top score for the node this pod's filter chose, zero elsewhere."""
        uid = str((args.pod.get("metadata") or {}).get("uid", ""))
        chosen = self.holds.node(uid)
        return {name: MAX_SCORE if name == chosen else 0 for name in args.node_names}

    # ----- bind --------------------------------------------------------------------------
    def bind(self, args: BindingArgs) -> dict[str, str]:
        started = time.perf_counter()
        try:
            if self.ledger.gpu_count(args.node) == 0:
                self._bind_dra(args)
                self._metrics.decided("bind", "bound", "dra_extended_resource")
                log.info(
                    "bound for DRA",
                    extra={"pod": f"{args.pod_namespace}/{args.pod_name}", "node": args.node},
                )
                return {"Error": ""}
            allocation = self._bind(args)
        except BindFailed as exc:
            self._metrics.decided("bind", "failed", exc.reason)
            log.warning(
                "bind failed",
                extra={
                    "pod": f"{args.pod_namespace}/{args.pod_name}",
                    "node": args.node,
                    "error": str(exc),
                },
            )
            return {"Error": f"vslice: {exc}"}
        finally:
            self._metrics.bind_seconds.observe(time.perf_counter() - started)
        self._metrics.decided("bind", "bound")
        if self._preemptor is not None:
            self._preemptor.placed(args.pod_uid)
        # Debug, as kube-scheduler logs its own binds only at -v=2: a line per pod was 3 % of
        # the extender's interpreter time in a burst; the pod's allocation annotation and the
        # decision counters record every bind anyway.
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "bound",
                extra={
                    "pod": f"{args.pod_namespace}/{args.pod_name}",
                    "node": args.node,
                    "gpus": [g.uuid for c in allocation.containers for g in c.gpus],
                },
            )
        return {"Error": ""}

    def _bind(self, args: BindingArgs) -> Allocation:
        if self._cluster is None or self._gates is None:
            raise BindFailed("this extender has no cluster access to bind with", "no_cluster")
        if not self._synced():
            raise BindFailed("ledger still loading from the cluster, retry", "not_synced")
        try:
            request = self.holds.request(args.pod_uid)
            if request is None:  # no filter seen for it (e.g. this replica restarted since)
                pod = self._cluster.read_pod(args.pod_namespace, args.pod_name)
                request = self._bind_request(pod, args)
                done = self._already_bound(pod, args)
                if done is not None:
                    return done
            with self._gates.entered(args.node, lambda: self._catch_up(args.node)):
                return self._bind_locked(request, args)
        except NotActive as exc:
            self._forget(args.pod_uid)
            raise BindFailed(str(exc), "not_active") from exc
        except LockBusy as exc:
            self._forget(args.pod_uid)
            raise BindFailed(str(exc), "lock_busy") from exc
        except ClusterError as exc:
            self._forget(args.pod_uid)
            raise BindFailed(str(exc), f"api_{exc.code or 'unreachable'}") from exc
        except BindFailed as exc:
            if exc.reason != "already_bound":  # a pod bound elsewhere keeps its slices
                self._forget(args.pod_uid)
            raise
        except Exception as exc:  # a bug must not leave slices booked for a pod never bound
            self._forget(args.pod_uid)
            log.exception("bind crashed", extra={"pod": f"{args.pod_namespace}/{args.pod_name}"})
            raise BindFailed(f"internal error: {type(exc).__name__}: {exc}", "internal") from exc

    def _bind_dra(self, args: BindingArgs) -> None:
        """Bind a pod asking whole GPUs by count alone to a node that serves them through DRA
        (the filter passed it: see ``_filter``): kube-scheduler's DRA plugin has allocated
        its claim before this call, so there is nothing for the ledger to record and no
        allocation annotation to write; the node's kubelet prepares the claim."""
        if self._cluster is None:
            raise BindFailed("this extender has no cluster access to bind with", "no_cluster")
        try:
            pod = self._cluster.read_pod(args.pod_namespace, args.pod_name)
            if not self._bound_pod(pod, args).count_only:
                raise BindFailed(
                    f"node {args.node} has no GPU on the extender path (all its GPUs are on "
                    "the DRA path), and this pod asks more than whole GPUs by count: give it "
                    "a ResourceClaim (a namespace labelled vslice.io/path=dra converts it)",
                    "dra_node",
                )
            if (pod.get("spec") or {}).get("nodeName") == args.node:
                return  # a retried call: the first one bound it
            self._cluster.bind_pod(args.pod_namespace, args.pod_name, args.pod_uid, args.node, {})
        except ClusterError as exc:
            raise BindFailed(str(exc), f"api_{exc.code or 'unreachable'}") from exc

    def _bind_request(self, pod: dict[str, Any], args: BindingArgs) -> PodRequest:
        return self._bound_pod(pod, args).request

    def _bound_pod(self, pod: dict[str, Any], args: BindingArgs) -> NormalizedPod:
        """The pod read back for a bind, normalized; BindFailed when it is another pod now
        (same name, new uid) or its request is invalid."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if uid != args.pod_uid:
            raise BindFailed(
                f"pod {args.pod_namespace}/{args.pod_name} is now uid {uid}, not {args.pod_uid}",
                "replaced",
            )
        try:
            return normalize_pod(pod, self._names)
        except InvalidRequest as exc:
            raise BindFailed(str(exc), "invalid") from exc

    def _bind_locked(self, request: PodRequest, args: BindingArgs) -> Allocation:
        allocation = self._book(request, args.node)
        text = encode_allocation(allocation)
        try:
            self._cluster_checked().bind_pod(
                args.pod_namespace,
                args.pod_name,
                args.pod_uid,
                args.node,
                {
                    ALLOCATION: text,
                    # Taken under the node's lock: the device plugin orders by it.
                    BIND_TIME: encode_bind_time(datetime.now(UTC)),
                    # Signs the exact text above, for this uid and node.
                    **self._proofs.annotations(args.pod_uid, args.node, text),
                },
            )
        except ClusterError as exc:
            if exc.code == 409:  # bound already (a retried call), or a newer pod of that name
                pod = self._cluster_checked().read_pod(args.pod_namespace, args.pod_name)
                done = self._already_bound(pod, args)
                if done is not None:
                    return done
            raise
        self.holds.mark_bound(args.pod_uid)
        return allocation

    def _book(self, request: PodRequest, node: str) -> Allocation:
        """Re-check this pod's slices against the fresh ledger and record them."""
        held = self.ledger.release(request.uid)
        self.holds.hold(request.uid, node, request)
        if held is not None and held.node == node:
            try:
                self.ledger.try_commit(request.uid, held, request.namespace)
                return held
            except NoFit:
                pass  # the held GPUs were taken meanwhile: look for others on the node
        try:
            return self.ledger.reserve(request, node)
        except NoFit as exc:
            reasons = exc.reasons.get(node, {})
            raise BindFailed(
                f"pod no longer fits on node {node}: {summarize_reasons(reasons) or 'unknown'}",
                next(iter(reasons), "nofit"),
            ) from exc

    def _catch_up(self, node: str) -> None:
        """Record every allocation the API server shows on the node now (other replicas'),
        exactly as the pod watch would: proofs checked, unreadable values block the node."""
        for pod in self._cluster_checked().pods_on_node(node):
            self._feed.apply("MODIFIED", pod)

    def _already_bound(self, pod: dict[str, Any], args: BindingArgs) -> Allocation | None:
        """None when the pod is not bound. When an earlier call already bound it, its
        allocation (recorded in the ledger, so the ledger says what the annotation says) if
        that was on ``args.node``; BindFailed otherwise."""
        metadata = pod.get("metadata") or {}
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if not bound_to or metadata.get("uid") != args.pod_uid:
            return None
        value = (metadata.get("annotations") or {}).get(ALLOCATION)
        try:
            allocation = decode_allocation(str(value)) if value is not None else None
        except DecodeError as exc:
            raise BindFailed(str(exc), "bad_annotation") from exc
        self.holds.drop(args.pod_uid)
        if allocation is not None:
            self._feed.apply("MODIFIED", pod)  # recorded as the watch will: proof checked
        if bound_to != args.node or allocation is None:
            raise BindFailed(f"pod is already bound to {bound_to}", "already_bound")
        return allocation

    def _cluster_checked(self) -> Cluster:
        assert self._cluster is not None
        return self._cluster
