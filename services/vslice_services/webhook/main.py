"""``vslice serve webhook``: the mutating admission webhook over HTTPS.

``POST /mutate`` takes an AdmissionReview v1 and answers one; ``GET /healthz`` answers ok.
With ``client_ca_file``, ``/mutate`` answers only the API server's client certificate (403
for anyone else).
A body that is not an AdmissionReview gets a 400 naming what is wrong (or, when it still
carries a request uid, a review that denies with that message), never a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vslice_core.errors import InvalidRequest
from vslice_core.model import QuotaLimits

from vslice_services.httpserve import (
    ClientAuth,
    HttpService,
    ReloadingTlsContext,
    Response,
    configure_logging,
    run_until_signal,
)
from vslice_services.quota import QuotaBook
from vslice_services.settings import WebhookSettings, load_settings
from vslice_services.webhook.policy import WebhookPolicy, review_pod
from vslice_services.webhook.review import (
    NotAReview,
    Verdict,
    encode_review,
    parse_review,
    request_uid,
)

log = logging.getLogger("vslice.webhook")

MUTATE_PATH = "/mutate"
QuotaLookup = Callable[[str], QuotaLimits | None]


def handle_review(body: bytes, policy: WebhookPolicy, quotas: QuotaLookup) -> Response:
    """One AdmissionReview in, one out: parse, decide (pure), encode."""
    try:
        request = parse_review(body)
    except InvalidRequest as exc:
        uid = "" if isinstance(exc, NotAReview) else request_uid(body)
        log.warning("malformed AdmissionReview", extra={"error": str(exc), "uid": uid})
        if not uid:
            return Response.text(f"malformed AdmissionReview: {exc}", 400)
        return Response.json(encode_review(uid, Verdict.deny(f"malformed request: {exc}", 400)))
    verdict = review_pod(request, policy, quotas(request.namespace))
    log.info(
        "admission",
        extra={
            "namespace": request.namespace,
            "pod": request.name,
            "allowed": verdict.allowed,
            "patch_ops": len(verdict.patch),
            "reason": verdict.message or None,
        },
    )
    return Response.json(encode_review(request.uid, verdict))


def policy_from(settings: WebhookSettings) -> WebhookPolicy:
    return WebhookPolicy(
        names=settings.resources,
        scheduler_name=settings.scheduler_name,
        hide_gpus_from_other_containers=settings.hide_gpus_from_other_containers,
    )


def client_auth(settings: WebhookSettings) -> ClientAuth | None:
    """With a client CA, only the API server (an allowed CN) may call /mutate; /healthz stays
    open to probes."""
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
    if settings.enforce_quota:
        cleanups.append(_watch_quotas(settings, quotas))
    policy = policy_from(settings)
    service = HttpService(
        settings.listen_address,
        {("POST", MUTATE_PATH): lambda body: handle_review(body, policy, quotas.limits)},
        tls=tls,
        client_auth=client_auth(settings),
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


def _watch_quotas(settings: WebhookSettings, quotas: QuotaBook) -> Callable[[], None]:
    from vslice_kube.coreapi import core_api
    from vslice_kube.watch import ListWatch

    api = core_api(settings.kubeconfig)
    watch = ListWatch("resourcequotas", api.list_resource_quota_for_all_namespaces, quotas)
    watch.start()
    return watch.stop
