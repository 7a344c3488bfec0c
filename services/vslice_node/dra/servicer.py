"""The DRAPlugin gRPC service (v1): translates the kubelet's messages to and from the plain types
of :mod:`vslice_node.dra.claims` and hands the work to a :class:`ClaimPreparer`.

Failures are kept per claim wherever they can be:

- a claim the preparer answers with :class:`ClaimError` gets that message as its ``error``;
- a claim the preparer leaves out of its answer gets an error saying so (the kubelet would
  otherwise report only "skipped N ResourceClaims");
- when the preparer raises while given several claims, the servicer asks again claim by claim,
  so an exception caused by one claim becomes that claim's ``error`` and the others still get
  their answers. The preparer is idempotent (the kubelet itself repeats calls), so asking again
  is safe;
- only when every claim fails on its own as well (or the call had a single claim) does the call
  fail as a whole, with a gRPC status whose message names the exception. The kubelet then
  ignores the response and retries all of the call's claims.

Every ``error`` names its claim as ``namespace/name`` (added unless the message has it already),
because the kubelet's event names only the claim and a node log line must stand on its own.
UIDs the preparer answers for but that were not asked about are dropped: the kubelet rejects a
whole response that contains one.

Every claim asked about is counted by its answer, and every NodePrepareResources call timed
(:mod:`vslice_node.dra.metrics`); a call that fails as a whole counts each of its claims as an
error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn, TypeVar

import grpc
from vslice_core.errors import ClusterError

from vslice_node.dra.api import dra_pb2 as pb
from vslice_node.dra.api import dra_pb2_grpc as pb_grpc
from vslice_node.dra.claims import (
    ClaimError,
    ClaimPreparer,
    ClaimRef,
    Prepared,
    PreparedDevice,
)
from vslice_node.dra.metrics import DraMetrics

log = logging.getLogger("vslice.draplugin.grpc")

Outcome = TypeVar("Outcome")


def claim_refs(claims: Sequence[pb.Claim]) -> list[ClaimRef]:
    """The request's claims; a claim without UID cannot be answered (answers are keyed by UID),
    so it is refused with the whole call."""
    refs = [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
    for ref in refs:
        if not ref.uid:
            raise ValueError(f"claim {ref.namespace}/{ref.name} has no UID")
    return refs


def claim_error(claim: ClaimRef, message: str) -> str:
    """``message`` naming its claim; a message that names it already is kept as it is."""
    name = f"{claim.namespace}/{claim.name}"
    return message if name in message else f"claim {name}: {message}"


def exception_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def device_message(device: PreparedDevice) -> pb.Device:
    message = pb.Device(
        request_names=list(device.request_names),
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=list(device.cdi_device_ids),
    )
    if device.share_id is not None:
        message.share_id = device.share_id
    return message


def prepare_message(claim: ClaimRef, outcome: object) -> pb.NodePrepareResourceResponse:
    if isinstance(outcome, Prepared):
        return pb.NodePrepareResourceResponse(devices=[device_message(d) for d in outcome.devices])
    if isinstance(outcome, ClaimError):
        return pb.NodePrepareResourceResponse(error=claim_error(claim, outcome.message))
    return pb.NodePrepareResourceResponse(
        error=claim_error(claim, f"internal error: the driver answered {type(outcome).__name__}")
    )


def unprepare_message(claim: ClaimRef, outcome: object) -> pb.NodeUnprepareResourceResponse:
    if outcome is None:
        return pb.NodeUnprepareResourceResponse()
    if isinstance(outcome, ClaimError):
        return pb.NodeUnprepareResourceResponse(error=claim_error(claim, outcome.message))
    return pb.NodeUnprepareResourceResponse(
        error=claim_error(claim, f"internal error: the driver answered {type(outcome).__name__}")
    )


class WholeCallFailed(Exception):
    """Every claim of the call failed with an exception; ``cause`` is the first of them."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(exception_text(cause))
        self.cause = cause


def ask(
    verb: str,
    call: Callable[[Sequence[ClaimRef]], Mapping[str, Outcome]],
    claims: Sequence[ClaimRef],
) -> dict[str, Outcome | ClaimError]:
    """``call(claims)``; on an exception, claim by claim.

    Raises :class:`WholeCallFailed` when no claim gets an answer without an exception.
    """
    asked = {c.uid for c in claims}
    try:
        answer: dict[str, Outcome | ClaimError] = dict(call(claims))
    except Exception as exc:
        if len(claims) <= 1:
            raise WholeCallFailed(exc) from exc
        log.warning(
            "%s failed for a batch; asking claim by claim",
            verb,
            extra={"claims": len(claims), "error": exception_text(exc)},
        )
        return ask_one_by_one(verb, call, claims)
    extra = sorted(set(answer) - asked)
    if extra:
        # The response is built from the request's claims only, so these never reach the kubelet.
        log.warning("%s answered for claims not asked about; dropped", verb, extra={"uids": extra})
    return answer


def ask_one_by_one(
    verb: str,
    call: Callable[[Sequence[ClaimRef]], Mapping[str, Outcome]],
    claims: Sequence[ClaimRef],
) -> dict[str, Outcome | ClaimError]:
    results: dict[str, Outcome | ClaimError] = {}
    raised: list[BaseException] = []
    for claim in claims:
        try:
            answer = call([claim])
        except Exception as exc:
            log.exception("%s failed", verb, extra={"claim": str(claim)})
            raised.append(exc)
            results[claim.uid] = ClaimError(exception_text(exc))
            continue
        if claim.uid in answer:
            results[claim.uid] = answer[claim.uid]
    if len(raised) == len(claims):
        raise WholeCallFailed(raised[0]) from raised[0]
    return results


class DRAPluginServicer(pb_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` on top of a :class:`ClaimPreparer`."""

    def __init__(self, preparer: ClaimPreparer, metrics: DraMetrics | None = None) -> None:
        self.preparer = preparer
        self.metrics = metrics if metrics is not None else DraMetrics()

    def NodePrepareResources(
        self, request: pb.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> pb.NodePrepareResourcesResponse:
        started = time.monotonic()
        try:
            response = self._prepare(request, context)
        except Exception:
            # Aborted (context.abort raises) or crashed: no claim of the call was prepared.
            self.metrics.prepared("error", len(request.claims))
            raise
        finally:
            self.metrics.prepare_seconds.observe(time.monotonic() - started)
        failed = sum(1 for answer in response.claims.values() if answer.error)
        self.metrics.prepared("error", failed)
        self.metrics.prepared("prepared", len(response.claims) - failed)
        return response

    def _prepare(
        self, request: pb.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> pb.NodePrepareResourcesResponse:
        claims = self._claims(request.claims, "NodePrepareResources", context)
        try:
            results = ask("NodePrepareResources", self.preparer.prepare, claims)
        except WholeCallFailed as exc:
            self._fail("NodePrepareResources", exc, context)
        response = pb.NodePrepareResourcesResponse()
        for claim in claims:
            outcome: object = results.get(
                claim.uid, ClaimError("the driver did not prepare this claim")
            )
            try:
                message = prepare_message(claim, outcome)
            except Exception as exc:  # a malformed answer for one claim spoils only that claim
                log.exception("cannot encode a prepared claim", extra={"claim": str(claim)})
                message = pb.NodePrepareResourceResponse(
                    error=claim_error(claim, f"internal error: {exception_text(exc)}")
                )
            if message.error:
                log.warning("claim not prepared", extra={"error": message.error})
            response.claims[claim.uid].CopyFrom(message)
        return response

    def NodeUnprepareResources(
        self, request: pb.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> pb.NodeUnprepareResourcesResponse:
        try:
            response = self._unprepare(request, context)
        except Exception:
            self.metrics.unprepared("error", len(request.claims))
            raise
        failed = sum(1 for answer in response.claims.values() if answer.error)
        self.metrics.unprepared("error", failed)
        self.metrics.unprepared("unprepared", len(response.claims) - failed)
        return response

    def _unprepare(
        self, request: pb.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> pb.NodeUnprepareResourcesResponse:
        claims = self._claims(request.claims, "NodeUnprepareResources", context)
        try:
            results = ask("NodeUnprepareResources", self.preparer.unprepare, claims)
        except WholeCallFailed as exc:
            self._fail("NodeUnprepareResources", exc, context)
        response = pb.NodeUnprepareResourcesResponse()
        for claim in claims:
            outcome: object = results.get(
                claim.uid, ClaimError("the driver did not unprepare this claim")
            )
            message = unprepare_message(claim, outcome)
            if message.error:
                log.warning("claim not unprepared", extra={"error": message.error})
            response.claims[claim.uid].CopyFrom(message)
        return response

    @staticmethod
    def _claims(
        claims: Sequence[pb.Claim], verb: str, context: grpc.ServicerContext
    ) -> list[ClaimRef]:
        try:
            return claim_refs(claims)
        except ValueError as exc:
            log.error("%s refused", verb, extra={"error": str(exc)})
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{verb}: {exc}")

    @staticmethod
    def _fail(verb: str, exc: WholeCallFailed, context: grpc.ServicerContext) -> NoReturn:
        # The code tells a retrying client whether waiting can help; the kubelet retries anyway.
        unavailable = isinstance(exc.cause, ClusterError | TimeoutError | ConnectionError)
        code = grpc.StatusCode.UNAVAILABLE if unavailable else grpc.StatusCode.INTERNAL
        log.error("%s failed for every claim", verb, extra={"code": code.name, "error": str(exc)})
        context.abort(code, f"{verb} failed: {exc}")
