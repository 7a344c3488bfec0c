"""``vslice serve webhook``: the mutating admission webhook over HTTPS.

``POST /mutate`` takes an AdmissionReview v1 and answers one (pods; and ResourceClaims and
ResourceClaimTemplates, which the validating configuration sends to the same route: their
answer never carries a patch; and kube-scheduler's writes of a vslice claim's allocation,
checked against the namespace's quota by ``claimquota``); ``GET /healthz`` answers ok;
``GET /metrics`` counts the answers and their latency (``metrics``).
With ``client_ca_file``, ``/mutate`` answers only the API server's client certificate (403
for anyone else); ``/healthz`` and ``/metrics`` stay open to probes and scrapers.
A body that is not an AdmissionReview gets a 400 naming what is wrong (or, when it still
carries a request uid, a review that denies with that message), never a crash.

With ``enforce_quota`` the webhook keeps three more list+watches, of ResourceClaims (the
allocated claims per namespace, ``quota.claims.ClaimLedger``), of vslice's ResourceSlices
(each card's memory, ``quota.claims.Cards``) and of pods (what the namespace's
extender-path pods hold, ``quota.pods.PodUsage``, counted with its claims).

The one side effect: a pod on the DRA path is admitted only once the ResourceClaimTemplate it
references exists; the webhook creates it first, except on a dry run (the configuration says
``sideEffects: NoneOnDryRun``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from vslice_core.errors import ClusterError, InvalidRequest
from vslice_core.model import QuotaLimits
from vslice_serving.httpserve import (
    ClientAuth,
    Handler,
    HttpService,
    ReloadingTlsContext,
    Response,
    configure_logging,
    run_until_signal,
)
from vslice_serving.settings import WebhookSettings, load_settings

from vslice_control.quota.claims import ClaimLedger
from vslice_control.quota.limits import QuotaBook
from vslice_control.quota.pods import PodUsage
from vslice_control.webhook import claimquota
from vslice_control.webhook.claimpolicy import review_claim
from vslice_control.webhook.draconvert import TemplateStore, ensure_template, store_for_callers
from vslice_control.webhook.metrics import WebhookMetrics
from vslice_control.webhook.policy import WebhookPolicy, review_pod
from vslice_control.webhook.review import (
    ClaimAdmission,
    NotAReview,
    Verdict,
    encode_review,
    parse_review,
    request_uid,
)
from vslice_control.webhook.routing import PATH_LABEL, NamespaceLabels

log = logging.getLogger("vslice.webhook")

MUTATE_PATH = "/mutate"
QuotaLookup = Callable[[str], QuotaLimits | None]
LabelLookup = Callable[[str], Mapping[str, str] | None]
NAMESPACE_SYNC_WAIT_S = 10.0
BOUND = "spec.nodeName!="
"""The pods the quota counts are bound ones: a large cluster's pending pods are never sent."""


def _no_labels(namespace: str) -> Mapping[str, str] | None:
    return None


MALFORMED = "malformed_review"
NO_API_ACCESS = "no_api_access"
CLAIM_TEMPLATE = "claim_template"
INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True)
class Answer:
    """The HTTP answer to one review and how the metrics count it."""

    response: Response
    result: str  # "mutated" | "allowed" | "refused"
    reason: str

    @classmethod
    def of(cls, response: Response, verdict: Verdict) -> Answer:
        if not verdict.allowed:
            return cls(response, "refused", verdict.reason)
        return cls(response, "mutated" if verdict.patch else "allowed", verdict.reason)


def handle_review(
    body: bytes,
    policy: WebhookPolicy,
    quotas: QuotaLookup,
    namespace_labels: LabelLookup = _no_labels,
    templates: TemplateStore | None = None,
    claims: ClaimLedger | None = None,
) -> Response:
    """One AdmissionReview in, one out: parse, decide (pure), create what the pod needs
    (``templates``, not on a dry run), encode. ``claims``: the allocated claims, without
    which a claim's allocation is not counted against the quota."""
    return answer_review(body, policy, quotas, namespace_labels, templates, claims).response


def answer_review(
    body: bytes,
    policy: WebhookPolicy,
    quotas: QuotaLookup,
    namespace_labels: LabelLookup = _no_labels,
    templates: TemplateStore | None = None,
    claims: ClaimLedger | None = None,
) -> Answer:
    """:func:`handle_review` with the result and reason the metrics count."""
    try:
        request = parse_review(body)
    except InvalidRequest as exc:
        uid = "" if isinstance(exc, NotAReview) else request_uid(body)
        log.warning("malformed AdmissionReview", extra={"error": str(exc), "uid": uid})
        if not uid:
            response = Response.text(f"malformed AdmissionReview: {exc}", 400)
            return Answer(response, "refused", MALFORMED)
        denial = Verdict.deny(f"malformed request: {exc}", 400, reason=MALFORMED)
        return Answer.of(Response.json(encode_review(uid, denial)), denial)
    if isinstance(request, ClaimAdmission):
        verdict = _review_claim(request, policy, quotas, claims)
        log.info(
            "admission",
            extra={
                "namespace": request.namespace,
                "kind": request.kind,
                "object": request.name,
                "allowed": verdict.allowed,
                "reason": verdict.message or None,
            },
        )
        return Answer.of(Response.json(encode_review(request.uid, verdict)), verdict)
    verdict = review_pod(
        request, policy, quotas(request.namespace), namespace_labels(request.namespace)
    )
    if verdict.allowed and verdict.objects and not request.dry_run:
        verdict = _created(verdict, templates)
    log.info(
        "admission",
        extra={
            "namespace": request.namespace,
            "pod": request.name,
            "allowed": verdict.allowed,
            "patch_ops": len(verdict.patch),
            "claim_templates": [o["metadata"]["name"] for o in verdict.objects] or None,
            "dry_run": request.dry_run or None,
            "reason": verdict.message or None,
        },
    )
    return Answer.of(Response.json(encode_review(request.uid, verdict)), verdict)


def _review_claim(
    request: ClaimAdmission,
    policy: WebhookPolicy,
    quotas: QuotaLookup,
    claims: ClaimLedger | None,
) -> Verdict:
    """A claim's allocation is counted in the ledger; anything else is a claim a user wrote."""
    limits = quotas(request.namespace)
    if claims is not None and claimquota.allocates(request):
        return claimquota.review_allocation(request, claims, limits, policy.names)
    cards = claims.cards.smallest_and_largest() if claims is not None else None
    return review_claim(request, limits, cards, policy.names)


def _created(verdict: Verdict, templates: TemplateStore | None) -> Verdict:
    """The verdict once the objects it needs exist; a denial saying why when they cannot."""
    if templates is None:
        return Verdict.deny(
            "this namespace's GPU pods take the DRA path, which needs the webhook to create "
            "ResourceClaimTemplates, and it has no API access: give it a kubeconfig, or use "
            f"the extender path (namespace label {PATH_LABEL}=extender)",
            code=500,
            reason=NO_API_ACCESS,
        )
    for template in verdict.objects:
        denial = ensure_template(templates, template)
        if denial is not None:
            return Verdict.deny(denial, code=500, reason=CLAIM_TEMPLATE)
    return verdict


def routes(
    metrics: WebhookMetrics,
    policy: WebhookPolicy,
    quotas: QuotaLookup,
    namespace_labels: LabelLookup = _no_labels,
    templates: TemplateStore | None = None,
    claims: ClaimLedger | None = None,
) -> dict[tuple[str, str], Handler]:
    """``POST /mutate``, counted and timed, and ``GET /metrics``."""

    def mutate(body: bytes) -> Response:
        started = time.perf_counter()
        try:
            answer = answer_review(body, policy, quotas, namespace_labels, templates, claims)
        except Exception:
            # The server answers 500 and the API server applies the failurePolicy: counted
            # as refused, since this answer admitted nothing.
            metrics.answered("refused", INTERNAL_ERROR, time.perf_counter() - started)
            raise
        metrics.answered(answer.result, answer.reason, time.perf_counter() - started)
        return answer.response

    def metrics_(_: bytes) -> Response:
        return Response(200, metrics.exposition(), "text/plain; version=0.0.4; charset=utf-8")

    return {("POST", MUTATE_PATH): mutate, ("GET", "/metrics"): metrics_}


def policy_from(settings: WebhookSettings) -> WebhookPolicy:
    return WebhookPolicy(
        names=settings.resources,
        scheduler_name=settings.scheduler_name,
        hide_gpus_from_other_containers=settings.hide_gpus_from_other_containers,
        path=settings.path,
        dra_namespaces=frozenset(settings.dra_namespaces),
        dra_extended_resource=settings.dra_extended_resource,
    )


def client_auth(settings: WebhookSettings) -> ClientAuth | None:
    """With a client CA, only the API server (an allowed CN) may call /mutate; /healthz and
    /metrics stay open to probes and scrapers."""
    if not settings.client_ca_file:
        return None
    return ClientAuth(frozenset(settings.client_names), frozenset({("POST", MUTATE_PATH)}))


def serve(config_path: str | None = None) -> int:
    settings = load_settings(WebhookSettings, config_path)
    configure_logging("webhook", settings.log_level)
    if not settings.tls_cert_file or not settings.tls_key_file:
        raise InvalidRequest(
            "tls_cert_file and tls_key_file must be set (the apiserver only calls HTTPS "
            f"webhooks), got {settings.tls_cert_file!r} and {settings.tls_key_file!r}",
            field="tls_cert_file",
            value=settings.tls_cert_file,
        )
    tls = ReloadingTlsContext(
        settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file
    )
    tls.current()  # fail at start, not at the first request, when the files are unusable
    quotas = QuotaBook(settings.resources)
    cleanups = []
    claims = None
    if settings.enforce_quota:
        cleanups.append(_watch_quotas(settings, quotas))
        pods = PodUsage()
        claims = ClaimLedger(others=pods)
        cleanups += _watch_claims(settings, claims, pods)
    labels = NamespaceLabels()
    callers = client_auth(settings)
    # Without client authentication anyone who reaches the port could make the webhook write
    # ResourceClaimTemplates with its own identity: then it writes none (docs/security.md).
    templates = store_for_callers(_namespace_api(settings, labels, cleanups), callers is not None)
    policy = policy_from(settings)
    service = HttpService(
        settings.listen_address,
        routes(WebhookMetrics(), policy, quotas.limits, labels.labels, templates, claims),
        tls=tls,
        client_auth=callers,
    )
    log.info(
        "serving",
        extra={
            "listen": settings.listen,
            "port": service.port,
            "path": MUTATE_PATH,
            "client_certificates": bool(settings.client_ca_file),
        },
    )
    return run_until_signal([service], cleanups)


def _namespace_api(
    settings: WebhookSettings, labels: NamespaceLabels, cleanups: list[Callable[[], None]]
) -> TemplateStore | None:
    """Watch the namespaces' labels and connect the template calls, when the API is there.

    The DRA path (the ``path`` setting, or ``dra_namespaces``) and quotas need the API: without
    it the webhook does not start. Otherwise it serves without: no label is read, every
    namespace takes the extender path.
    """
    from vslice_kube.claimtemplates import ClaimTemplates
    from vslice_kube.coreapi import core_api
    from vslice_kube.watch import ListWatch

    needed = settings.enforce_quota or settings.path == "dra" or bool(settings.dra_namespaces)
    try:
        api = core_api(settings.kubeconfig)
        templates = ClaimTemplates.connect(settings.kubeconfig)
    except ClusterError as exc:
        if needed:
            raise
        log.warning(
            "no API access: namespace labels are not read, GPU pods take the extender path",
            extra={"error": str(exc), "label": PATH_LABEL},
        )
        return None
    watch = ListWatch("namespaces", api.list_namespace, labels)
    watch.start()
    cleanups.append(watch.stop)
    # Until the first list the labels are unknown and the settings alone would decide: wait a
    # little for it, so a namespace labelled for DRA is not routed otherwise at start.
    if not watch.wait_synced(NAMESPACE_SYNC_WAIT_S):
        log.warning(
            "namespace labels not listed yet: the settings decide each pod's path until they are",
            extra={"label": PATH_LABEL, "waited_s": NAMESPACE_SYNC_WAIT_S},
        )
    return templates


def _watch_quotas(settings: WebhookSettings, quotas: QuotaBook) -> Callable[[], None]:
    from vslice_kube.coreapi import core_api
    from vslice_kube.watch import ListWatch

    api = core_api(settings.kubeconfig)
    watch = ListWatch("resourcequotas", api.list_resource_quota_for_all_namespaces, quotas)
    watch.start()
    return watch.stop


def _watch_claims(
    settings: WebhookSettings, claims: ClaimLedger, pods: PodUsage
) -> list[Callable[[], None]]:
    """The allocated claims of every namespace, the cards they are allocated on, and the
    extender-path pods counted with them."""
    from vslice_kube.coreapi import core_api
    from vslice_kube.resourceapi import claim_watches
    from vslice_kube.watch import ListWatch

    bound = partial(core_api(settings.kubeconfig).list_pod_for_all_namespaces, field_selector=BOUND)
    watches = [
        *claim_watches(settings.kubeconfig, claims, claims.cards),
        ListWatch("pods", bound, pods),
    ]
    for watch in watches:
        watch.start()
    return [watch.stop for watch in watches]
