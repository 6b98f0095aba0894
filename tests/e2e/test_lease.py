"""Forged kube-scheduler Leases on the real control plane (issue 37, item 5): an extender following a
Lease whose renewTime lies in the future stops binding once the deadline has passed on its own clock;
one whose Lease has no leaseDurationSeconds binds nothing and says why."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from e2e.cluster import SYSTEM_NS, extender_bind, free_port, wait_until
from e2e.conftest import Cluster

LEASE = "forged-scheduler"
POD = "forged-extender-0"
ASK = {"koordinator.sh/gpu-core": "10", "koordinator.sh/gpu-memory-ratio": "10"}


def _micro(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(renewed: datetime, duration: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": f"{POD}_6d1f0e", "renewTime": _micro(renewed),
                            "acquireTime": _micro(renewed)}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": SYSTEM_NS}, "spec": spec}


def test_a_follower_stops_binding_on_a_forged_lease(cluster: Cluster) -> None:
    cp = cluster.cp
    node = cluster.node("forged-1", gpus=2)
    names = (f"p{i}" for i in itertools.count())

    def bind() -> str:
        pod = cluster.get_pod(cluster.pod(next(names), ASK, scheduler="e2e-manual")["metadata"]["name"])
        return extender_bind(port, cluster.ns, pod["metadata"]["name"], pod["metadata"]["uid"], node)

    now = datetime.now(UTC)
    cp.apply(_lease(now + timedelta(hours=1), 6))  # renewed an hour from now; nothing renews it
    port = free_port()
    ext = cp.start_extender("--follow-lease", LEASE, "--pod-name", POD, name="extender-forged", port=port)
    try:
        # first seen at the extender's start: it may bind until 2/3 of 6 s have passed on its own clock, then never
        # (before the fix it bound for as long as the renewTime was ahead: an hour)
        wait_until(lambda: bind() == "not the leader", timeout=120, interval=0.5,
                   what="the follower refusing to bind on a Lease renewed in the future")
        assert bind() == "not the leader"

        cp.kubectl("delete", "lease", LEASE, "-n", SYSTEM_NS)
        cp.apply(_lease(datetime.now(UTC), None))  # renewed now, but with no duration
        said = "has no leaseDurationSeconds: this extender does not bind while it does"
        wait_until(lambda: said in ext.tail(1000), timeout=120, what="the follower saying the Lease has no duration")
        assert bind() == "not the leader"  # before the fix: a fresh renewal of a "15 s" Lease, so bound
    finally:
        ext.stop()
        cp.kubectl("delete", "lease", LEASE, "-n", SYSTEM_NS, "--ignore-not-found")
