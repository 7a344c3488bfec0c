"""The webhook's Prometheus metrics, on a registry of its own (served at ``GET /metrics``,
open like ``/healthz``: only ``/mutate`` asks for the API server's client certificate).

- ``vslice_webhook_admissions_total{result, reason}``: every answer ``/mutate`` gives.
  ``result`` is ``mutated`` (allowed with a patch), ``allowed`` (allowed as it is) or
  ``refused`` (denied, a 400 for a body that is not a review, or an internal error);
  ``reason`` a short machine code: the field of a refused value
  (``spec.containers[].resources.limits['nvidia.com/gpumem']``, indices dropped), or one of
  ``not_gpu_pod``, ``not_create``, ``forbidden_annotation``, ``dra``, ``claim``,
  ``unknown_resource``, ``forbidden_env``, ``quota_exceeded``, ``no_api_access``,
  ``claim_template``, ``malformed_review``, ``internal_error``; ``none`` when there is none
  (a GPU pod patched for the extender path);
- ``vslice_webhook_admission_seconds``: time to answer ``/mutate`` (histogram, the
  extender's buckets), including the creation of a DRA pod's ResourceClaimTemplate.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# The extender's buckets (vslice_control.extender.metrics.BUCKETS; the two packages do not
# import each other): admission answers take as long as filter answers, and alike buckets
# let one dashboard panel show both.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

RESULTS = ("mutated", "allowed", "refused")


class WebhookMetrics:
    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created is noise here
        self.registry = CollectorRegistry()
        self.admissions = Counter(
            "vslice_webhook_admissions",
            "Answers to admission reviews by result (mutated, allowed, refused) and reason",
            ["result", "reason"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "vslice_webhook_admission_seconds",
            "Time to answer an admission review",
            buckets=BUCKETS,
            registry=self.registry,
        )

    def answered(self, result: str, reason: str, seconds: float) -> None:
        if result not in RESULTS:  # a typo here would split a dashboard's series silently
            raise ValueError(f"result must be one of {', '.join(RESULTS)}, got {result!r}")
        self.admissions.labels(result, reason or "none").inc()
        self.seconds.observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
