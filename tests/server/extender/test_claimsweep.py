"""The claim ledger's upkeep (server/extender/claimsweep.py): the leader releases the claims of binds
that never completed, after writing to their pods, and of pods bound (also after a restart) or gone;
claims age by the reader's clock; an unreadable ledger is read again until it is repaired."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.kube.ledger import EXPIRED_ANNOTATION, NAME
from devshare.kube.memory import MemoryBackend
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




# ------------------------------------------------------------------ the ledger heals (issue 37, item 2)

LEDGER_KEY = f"devshare-system/{NAME}"


def put_ledger(inner: MemoryBackend, claims: str) -> None:
    inner.store.put("configmaps", LEDGER_KEY, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": "devshare-system", "labels": {"devshare.io/claim-ledger": "v2"}},
        "data": {"claims": claims}})


def stored(inner: MemoryBackend, name: str) -> dict[str, Any]:
    return inner.store.get("pods", f"default/{name}")


async def claim_only(r: Replica, name: str) -> bool:
    """``r`` claims devices for pod ``name`` and sends no Binding (it dies before it can, say)."""
    req = parse_pod(stored(r.inner, name))
    if req.key in r.state.pods:
        return False
    alloc = r.scheduler.allocate_on(req, NODE)
    if not isinstance(alloc, PodAllocation):
        return False
    r.lifecycle.assume(req, alloc, now=0.0)
    if await r.claims.claim(req, alloc) is not None:
        r.lifecycle.forget(req.key, alloc)
        return False
    return True


async def test_a_deleted_or_repaired_ledger_is_used_again_at_the_next_bind_without_a_restart() -> None:
    inner = cluster(1, gpus=2, pods=[pod(f"p{i}", core=30) for i in range(3)])
    put_ledger(inner, "not json")
    a = Replica(inner, "a")
    await a.claims.load()
    for _ in range(2):
        assert "until it is repaired or deleted" in await a.bind(stored(inner, "p0"))
    inner.store.delete("configmaps", LEDGER_KEY)  # the operator deletes it
    assert await a.bind(stored(inner, "p0")) == ""
    put_ledger(inner, "[{garbage")  # broken again by hand, then repaired by hand
    assert "until it is repaired or deleted" in await a.bind(stored(inner, "p1"))
    put_ledger(inner, "[]")
    assert await a.bind(stored(inner, "p1")) == ""


async def test_every_replica_reads_an_unreadable_ledger_again_at_each_sweep() -> None:
    inner = cluster(1, gpus=2, pods=[pod("p", core=30)])
    put_ledger(inner, "not json")
    b = Replica(inner, "b")
    await b.claims.load()
    await b.sweep.sweep(leading=False)
    assert b.claims.current is not None and b.claims.current.error is not None
    put_ledger(inner, "[]")
    await b.sweep.sweep(leading=False)  # a follower too: the next sweep sees the repair
    assert b.claims.current is not None and b.claims.current.error is None


async def test_a_claim_dated_in_the_future_expires_by_the_readers_clock() -> None:
    now = [1000.0]
    inner = cluster(1, gpus=2, pods=[pod("stuck", core=50)])
    ahead = Replica(inner, "ahead", clock=lambda: now[0] + 3600)  # a replica whose clock runs an hour ahead
    assert await claim_only(ahead, "stuck")
    leader = Replica(inner, "leader", clock=lambda: now[0])
    await leader.claims.load()
    await leader.sweep.sweep(leading=True)
    assert set(await ledger_claims(inner)) == {"default/stuck"}  # seen just now: young
    now[0] += 61
    await leader.sweep.sweep(leading=True)
    assert await ledger_claims(inner) == {}


async def test_after_a_restart_the_claims_of_pods_bound_meanwhile_leave_at_the_first_sweep() -> None:
    inner = cluster(1, gpus=2, pods=[pod("a", core=50), pod("b", core=50)])
    first = Replica(inner, "first")
    for name in ("a", "b"):
        assert await first.bind(stored(inner, name)) == ""
    assert len(await ledger_claims(inner)) == 2  # killed before its watch showed them bound
    again = Replica(inner, "again")  # restarted: the pods come from a list, not from watch events
    await again.claims.load()
    await again.sweep.sweep(leading=True)
    assert await ledger_claims(inner) == {}
    assert {k for k, r in again.state.pods.items() if r.phase == "bound"} == {"default/a", "default/b"}


PODS = 6
Op = tuple[str, int]
ops = st.lists(st.one_of(
    st.tuples(st.just("bind"), st.integers(0, PODS - 1)),  # a bind, claim and Binding
    st.tuples(st.just("claim"), st.integers(0, PODS - 1)),  # a claim whose Binding never goes out
    st.tuples(st.just("kill"), st.just(0)),  # the process dies (loses its memory) and starts again
    st.tuples(st.just("watch"), st.integers(0, 4)),  # its watch delivers the next few pod events
    st.tuples(st.just("sweep"), st.integers(0, 1)),  # a sweep, leading or not
    st.tuples(st.just("tick"), st.integers(1, 90)),  # seconds pass
), max_size=24)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_claims_kills_and_restarts_leave_no_claim_after_the_ttl_and_one_sweep(seq: list[Op]) -> None:
    asyncio.run(_run(seq))


async def _run(seq: list[Op]) -> None:
    now = [1000.0]
    inner = cluster(1, gpus=2, pods=[pod(f"p{i}", core=30) for i in range(PODS)])
    lives = iter(range(1000))

    async def start() -> Replica:
        r = Replica(inner, f"life-{next(lives)}", clock=lambda: now[0])
        await r.claims.load()
        return r

    r = await start()
    for op, arg in seq:
        if op == "bind" and not stored(inner, f"p{arg}")["spec"].get("nodeName"):
            await r.bind(stored(inner, f"p{arg}"))
        elif op == "claim" and not stored(inner, f"p{arg}")["spec"].get("nodeName"):
            await claim_only(r, f"p{arg}")
        elif op == "kill":
            r = await start()
        elif op == "watch":
            r.watch(arg)
        elif op == "sweep":
            await r.sweep.sweep(leading=bool(arg))
        elif op == "tick":
            now[0] += arg
    r.watch()  # the watch delivers what it has, as it does within moments
    now[0] += r.claims.ttl + 1
    await r.sweep.sweep(leading=True)
    left = await ledger_claims(inner)
    bound = {k for k, p in inner.store.objects["pods"].items() if p["spec"].get("nodeName")}
    assert not set(left) & bound, f"claims of bound pods left: {sorted(set(left) & bound)}"
    assert left == {}, f"claims older than the TTL left: {sorted(left)}"
