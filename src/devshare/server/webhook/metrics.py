"""Prometheus metrics of the webhook, in a registry of their own (one per server)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, generate_latest

from devshare.server.metrics import new_registry

# results
ALLOWED = "allowed"  # allowed unchanged
PATCHED = "patched"  # allowed with a patch (mutate)
DENIED = "denied"  # refused (validate)
SKIPPED = "skipped"  # not a device pod / not a Pod / not CREATE: allowed untouched
MALFORMED = "malformed"  # the body was not an AdmissionReview: 400
ERROR = "error"  # the webhook failed on this pod (a bug): see the log


class Metrics:
    def __init__(self) -> None:
        self.registry = new_registry()  # with devshare_build_info, without _created series
        self.reviews = Counter(
            "devshare_webhook_reviews",
            "Admission reviews answered, by operation (validate, mutate) and result.",
            ["operation", "result"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "devshare_webhook_review_seconds",
            "Time to answer one admission review, body read to response built.",
            ["operation"],
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self.rejections = Counter(
            "devshare_webhook_rejections",
            "Reasons pods were refused, by class (request, node-name, device-type, internal).",
            ["reason"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def count(self, operation: str, result: str) -> float:
        """The current value of one reviews counter (for tests and the bench)."""
        value = self.registry.get_sample_value(
            "devshare_webhook_reviews_total", {"operation": operation, "result": result}
        )
        return value or 0.0
