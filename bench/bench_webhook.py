"""Admission reviews per second: the webhook served in-process by aiohttp over TLS on loopback,
called by an aiohttp client (keep-alive, a few requests in flight, as the API server does).

Client and server share one process and one event loop, so the figures are a lower bound of what
the server alone sustains on one core. Also prints the cost of the decision alone (no HTTP).

    python bench/bench_webhook.py [--requests 3000] [--concurrency 8] [--plain]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from devshare.server.tls import CertReloader, make_serving_cert
from devshare.server.webhook.app import WebhookConfig, make_app
from devshare.server.webhook.cluster import StaticDeviceTypes
from devshare.server.webhook.mutate import mutation
from devshare.server.webhook.validate import judge


def pod(resources: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod the size of a typical Deployment's (env, probes, volumes): the body is most of the cost."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "inference-7d9f8c-",
            "namespace": "team-a",
            "labels": {"app": "inference", "pod-template-hash": "7d9f8c"},
            "annotations": dict(annotations or {}),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "inference-7d9f8c",
                                 "uid": "0b0c3e3e-5b1a-4c43-9f0e-6c1f5f1c2d11", "controller": True}],
        },
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example.com/team-a/inference:1.4.2",
                    "args": ["--model", "/models/resnet50", "--port", "8080"],
                    "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(10)],
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "resources": {"requests": {"cpu": "2", "memory": "8Gi", **resources},
                                  "limits": {"memory": "8Gi", **resources}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                    "volumeMounts": [{"name": "models", "mountPath": "/models"}],
                },
                {"name": "metrics", "image": "registry.example.com/exporter:0.3",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
            ],
            "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
        },
    }


PODS = {
    "GPU pod (koordinator.sh/gpu 50)": pod({"koordinator.sh/gpu": "50"}),
    "GPU pod (mGPU 2 cards x 50%)": pod(
        {"vke.volcengine.com/mgpu-core": "100", "vke.volcengine.com/mgpu-memory": "8192"},
        {"vke.volcengine.com/container-multiple-gpu": "2,0"},
    ),
    "non-GPU pod": pod({}),
}


def review(p: dict[str, Any], i: int) -> bytes:
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": f"uid-{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "team-a", "operation": "CREATE", "object": p,
                    "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"}},
    }).encode()


async def drive(
    url: str, body: bytes, n: int, concurrency: int, ctx: ssl.SSLContext | None
) -> tuple[float, list[float]]:
    """Send ``n`` reviews with ``concurrency`` in flight; return (reviews/s, per-request seconds)."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=ctx if ctx is not None else False)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one() -> None:
            t = time.perf_counter()
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                assert r.status == 200, r.status
            latencies.append(time.perf_counter() - t)

        async def worker(count: int) -> None:
            for _ in range(count):
                await one()

        for _ in range(concurrency):  # warm up the connections
            await one()
        latencies.clear()
        started = time.perf_counter()
        share = [n // concurrency + (1 if k < n % concurrency else 0) for k in range(concurrency)]
        await asyncio.gather(*(worker(c) for c in share))
        elapsed = time.perf_counter() - started
    return n / elapsed, latencies


def handler_seconds(config: WebhookConfig, operation: str) -> tuple[float, float]:
    """(sum of seconds, count) of the webhook's latency histogram for one operation."""
    registry = config.metrics.registry
    labels = {"operation": operation}
    total = registry.get_sample_value("devshare_webhook_review_seconds_sum", labels) or 0.0
    count = registry.get_sample_value("devshare_webhook_review_seconds_count", labels) or 0.0
    return total, count


async def bench_http(n: int, concurrency: int, plain: bool) -> None:
    config = WebhookConfig(cluster=StaticDeviceTypes(frozenset({"gpu", "rdma"})))
    runner = web.AppRunner(make_app(config), access_log=None)
    await runner.setup()
    with tempfile.TemporaryDirectory() as tmp:
        client_ctx: ssl.SSLContext | None = None
        server_ctx: ssl.SSLContext | None = None
        if not plain:
            certs = make_serving_cert("bench", "bench", Path(tmp), extra_names=("127.0.0.1",))
            server_ctx = CertReloader(certs.cert, certs.key).context
            client_ctx = ssl.create_default_context(cafile=str(certs.ca_cert))
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
        await site.start()
        port = runner.addresses[0][1]
        scheme = "http" if plain else "https"
        print(f"over {scheme.upper()} on loopback, {n} reviews per row, {concurrency} in flight")
        print("(server us: mean time in the handler, body read to response built, from the webhook's histogram)")
        print(f"{'pod':36} {'path':10} {'body':>8} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'server us':>10}")
        for title, p in PODS.items():
            body = review(p, 1)
            for path in ("/validate", "/mutate"):
                before = handler_seconds(config, path[1:])
                rate, lat = await drive(f"{scheme}://127.0.0.1:{port}{path}", body, n, concurrency, client_ctx)
                after = handler_seconds(config, path[1:])
                server_us = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1e6
                lat.sort()
                p50 = statistics.median(lat) * 1000
                p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
                print(f"{title:36} {path:10} {len(body):>7}B {rate:>10.0f} {p50:>8.2f} {p99:>8.2f} {server_us:>10.0f}")
        await runner.cleanup()


def bench_decision(n: int) -> None:
    print(f"\nthe decision alone (no HTTP, no JSON), mean of {n} calls")
    print(f"{'pod':36} {'validate us':>12} {'mutate us':>10}")
    cluster = StaticDeviceTypes(frozenset({"gpu", "rdma"}))
    from devshare.model.podresources import requests_devices

    for title, p in PODS.items():
        t = time.perf_counter()
        for _ in range(n):
            if requests_devices(p):
                judge(p, cluster)
        v = (time.perf_counter() - t) / n * 1e6
        t = time.perf_counter()
        for _ in range(n):
            if requests_devices(p):
                mutation(p)
        m = (time.perf_counter() - t) / n * 1e6
        print(f"{title:36} {v:>12.1f} {m:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="reviews per row (bounded)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument("--plain", action="store_true", help="plain HTTP instead of TLS (to see TLS's share)")
    args = parser.parse_args()
    asyncio.run(bench_http(max(args.requests, args.concurrency), max(1, args.concurrency), args.plain))
    bench_decision(2000)


if __name__ == "__main__":
    main()
