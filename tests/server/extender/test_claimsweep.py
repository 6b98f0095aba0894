"""The claim ledger's upkeep (server/extender/claimsweep.py): the leader releases the claims of binds
that never completed, after writing to their pods, and of pods bound or gone."""

from __future__ import annotations

from devshare.kube.ledger import EXPIRED_ANNOTATION
from devshare.model.allocation import PodAllocation
from devshare.model.pod import parse_pod
from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
from support.claims import NODE, Replica, ledger_claims
from support.extender import cluster, pod


async def test_the_sweep_releases_claims_that_never_bound_after_writing_to_their_pod() -> None:
    now = [1000.0]
    inner = cluster(1, gpus=2, pods=[pod("stuck", core=50), pod("bound", core=50), pod("gone", core=50)])
    a = Replica(inner, "a", clock=lambda: now[0])
    for name in ("stuck", "gone"):  # claims whose Bindings never came (the writer died, say)
        req = parse_pod(inner.store.get("pods", f"default/{name}"))
        alloc = a.scheduler.allocate_on(req, NODE)
        assert isinstance(alloc, PodAllocation)
        a.lifecycle.assume(req, alloc, now=0.0)
        assert await a.claims.claim(req, alloc) is None
    assert await a.bind(inner.store.get("pods", "default/bound")) == ""
    inner.delete("pods", "default/gone")
    rv_stuck = inner.store.get("pods", "default/stuck")["metadata"]["resourceVersion"]
    await a.sweep.sweep(leading=True)
    assert len(await ledger_claims(inner)) == 3  # younger than the TTL: kept
    now[0] += 61
    await a.sweep.sweep(leading=False)
    assert len(await ledger_claims(inner)) == 3  # only the leader prunes
    await a.sweep.sweep(leading=True)
    assert set(await ledger_claims(inner)) == {"default/bound"}
    stuck = inner.store.get("pods", "default/stuck")
    # the pod was written to first: a Binding sent with the version read before the claim now fails
    assert stuck["metadata"]["resourceVersion"] != rv_stuck
    assert stuck["metadata"]["annotations"][EXPIRED_ANNOTATION].startswith(f"{NODE} ")
    assert "default/bound" not in [k for k, p in inner.store.objects["pods"].items()
                                   if EXPIRED_ANNOTATION in (p["metadata"].get("annotations") or {})]


