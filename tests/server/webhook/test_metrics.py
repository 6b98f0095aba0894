"""The webhook's Prometheus metrics (server/webhook/metrics.py): a registry of their own per server,
the reviews counted by operation and result, read back by :meth:`Metrics.count`."""

from __future__ import annotations

import platform

from prometheus_client.parser import text_string_to_metric_families

from devshare import __version__
from devshare.server.webhook.metrics import ALLOWED, DENIED, PATCHED, SKIPPED, Metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples}


def test_count_reads_one_reviews_counter() -> None:
    m = Metrics()
    assert m.count("mutate", PATCHED) == 0.0  # never counted: 0, not None
    m.reviews.labels("mutate", PATCHED).inc()
    m.reviews.labels("mutate", PATCHED).inc()
    m.reviews.labels("validate", DENIED).inc()
    assert m.count("mutate", PATCHED) == 2.0
    assert m.count("validate", DENIED) == 1.0
    assert m.count("validate", PATCHED) == 0.0 and m.count("mutate", DENIED) == 0.0


def test_each_server_counts_in_its_own_registry() -> None:
    """Two webhooks in one process (tests, the bench) never add to each other's counts, and registering
    the same family names twice does not fail."""
    a, b = Metrics(), Metrics()
    a.reviews.labels("validate", ALLOWED).inc()
    assert a.count("validate", ALLOWED) == 1.0 and b.count("validate", ALLOWED) == 0.0


def test_the_exposition_carries_reviews_latency_and_rejections() -> None:
    m = Metrics()
    m.reviews.labels("validate", SKIPPED).inc()
    m.latency.labels("validate").observe(0.0003)
    m.rejections.labels("request").inc(3)
    got = samples(m)
    assert got[("devshare_webhook_reviews_total", (("operation", "validate"), ("result", "skipped")))] == 1
    assert got[("devshare_webhook_review_seconds_count", (("operation", "validate"),))] == 1
    assert got[("devshare_webhook_review_seconds_bucket", (("le", "0.00025"), ("operation", "validate")))] == 0
    assert got[("devshare_webhook_review_seconds_bucket", (("le", "0.0005"), ("operation", "validate")))] == 1
    assert got[("devshare_webhook_rejections_total", (("reason", "request"),))] == 3


def test_the_webhook_tells_its_build_and_has_no_created_series() -> None:
    """Issue 40: devshare_build_info, and no _created series beside each counter and histogram."""
    metrics = Metrics()
    metrics.reviews.labels("mutate", "patched").inc()
    metrics.latency.labels("mutate").observe(0.001)
    text = metrics.render().decode()
    assert "devshare_webhook_reviews_total" in text and "_created" not in text
    info = {k: v for k, v in samples(metrics).items() if k[0] == "devshare_build_info"}
    assert info == {("devshare_build_info", (("python", platform.python_version()), ("version", __version__))): 1}
