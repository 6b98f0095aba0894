"""Prometheus helpers shared by the HTTP services (server/metrics.py): a registry per server with the
build information in it, the /metrics response, one sample read back."""

from __future__ import annotations

import platform

from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

from devshare import __version__
from devshare.server.metrics import LATENCY_BUCKETS, metrics_response, new_registry, sample


def test_a_new_registry_holds_the_build_information_and_nothing_else() -> None:
    registry = new_registry()
    assert [m.name for m in registry.collect()] == ["devshare_build_info"]
    labels = {"version": __version__, "python": platform.python_version()}
    assert sample(registry, "devshare_build_info", labels) == 1


def test_registries_are_separate() -> None:
    a, b = new_registry(), new_registry()
    Counter("devshare_test_things", "Things.", registry=a).inc(2)
    Counter("devshare_test_things", "Things.", registry=b)  # the same name again: no clash
    assert sample(a, "devshare_test_things_total") == 2 and sample(b, "devshare_test_things_total") == 0


def test_sample_is_zero_when_absent() -> None:
    registry = new_registry()
    c = Counter("devshare_test_seen", "Seen.", ["kind"], registry=registry)
    c.labels("pod").inc()
    assert sample(registry, "devshare_test_seen_total", {"kind": "pod"}) == 1
    assert sample(registry, "devshare_test_seen_total", {"kind": "node"}) == 0  # no such series
    assert sample(registry, "devshare_no_such_metric") == 0


def test_the_metrics_response_is_the_exposition_with_its_content_type() -> None:
    registry = new_registry()
    Counter("devshare_test_answers", "Answers.", registry=registry).inc()
    body = generate_latest(registry)
    response = metrics_response(body)
    assert response.status == 200 and response.body == body
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert b"devshare_test_answers_total 1.0" in body and b"_created" not in body


def test_latency_buckets_rise() -> None:
    assert list(LATENCY_BUCKETS) == sorted(set(LATENCY_BUCKETS))
    assert LATENCY_BUCKETS[0] <= 0.0001 and LATENCY_BUCKETS[-1] >= 5.0  # tens of us to a slow bind
