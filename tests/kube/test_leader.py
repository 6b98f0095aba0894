"""Lease-based leader election: one leader at a time, failover after the lease duration.

Durations are asserted on a clock the test moves by hand (``Clock``), never by measuring wall time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from devshare.kube.backend import Backend
from devshare.kube.leader import LeaderElector
from devshare.kube.memory import MemoryBackend
from devshare.kube.rest import KubeClient
from fakeapi.server import FakeApiServer
from support.waiting import eventually, settled

# durations in the seconds of a clock the test moves by hand; retries happen every 10 real ms
LEASE = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 0.01}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def running(elector: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_for(cond: Callable[[], object]) -> None:
    """Until ``cond`` holds, however long a loaded machine takes (support.waiting's failsafe ends a hang)."""
    await eventually(cond)


async def a_few_retries() -> None:
    """Real time for both electors to retry a few times (the lease clock does not move)."""
    await asyncio.sleep(0.1)


async def failover(a_backend: Backend, b_backend: Backend) -> None:
    clock = Clock()
    a = LeaderElector(a_backend, identity="a", clock=clock, **LEASE)
    b = LeaderElector(b_backend, identity="b", clock=clock, **LEASE)
    async with running(a) as ta:
        await wait_for(lambda: a.is_leader)
        async with running(b):
            for _ in range(4):  # 4 x 9 s, far past the lease: a renews, so b must not take over
                clock.now += 9.0
                # a renews at the new time, and b sees that renewal, before the clock moves again
                await wait_for(lambda: a._last_renew == clock.now and b._observed_at == clock.now)
                assert a.is_leader and not b.is_leader
            ta.cancel()  # a stops renewing (a crash: no release)
            with contextlib.suppress(asyncio.CancelledError):
                await ta
            await a_few_retries()
            clock.now += LEASE["lease_duration"] - 1  # the lease is still live as b observed it
            await a_few_retries()
            assert not b.is_leader
            clock.now += 2  # now it is not
            await wait_for(lambda: b.is_leader)
            lease = await b_backend.get_lease(b.namespace, b.name)
            assert lease is not None
            assert lease["spec"]["holderIdentity"] == "b"
            assert lease["spec"]["leaseTransitions"] == 1
            assert lease["spec"]["leaseDurationSeconds"] == 15


async def test_failover_in_memory() -> None:
    backend = MemoryBackend()
    await failover(backend, backend)


async def test_failover_through_the_api(fake_api: FakeApiServer, fake_kubeconfig: object) -> None:
    a = KubeClient.connect(fake_kubeconfig)  # type: ignore[arg-type]
    b = KubeClient.connect(fake_kubeconfig)  # type: ignore[arg-type]
    try:
        await failover(a, b)
    finally:
        await a.close()
        await b.close()
    # at least a's four renewals (one per clock step, each awaited) and b's takeover went through the API
    assert fake_api.count("update", "leases") >= 5


async def test_leader_steps_down_when_its_lease_is_taken() -> None:
    backend = MemoryBackend()
    a = LeaderElector(backend, identity="a", clock=Clock(), **LEASE)  # the lease clock stands still: no expiry
    async with running(a):
        await settled(a.leading.wait())
        lease = await backend.get_lease(a.namespace, a.name)
        assert lease is not None
        await backend.replace_lease(a.namespace, {**lease, "spec": {**lease["spec"], "holderIdentity": "x"}})
        await wait_for(lambda: not a.is_leader)
    assert "x" in a.stepped_down or "conflict" in a.stepped_down, a.stepped_down


async def test_leader_steps_down_when_renewals_fail(fake_api: FakeApiServer, live_backend: KubeClient) -> None:
    changes: list[bool] = []
    clock = Clock()
    a = LeaderElector(live_backend, identity="a", on_change=changes.append, clock=clock, **LEASE)
    async with running(a):
        await wait_for(lambda: a.is_leader)
        fake_api.fail_next("get", "leases", times=1000, code=503)
        await a_few_retries()
        assert a.is_leader  # failures within the renew deadline are ridden out
        clock.now += LEASE["renew_deadline"] + 0.5  # past the renew deadline, before the lease ends
        await wait_for(lambda: not a.is_leader)  # so it stops before anyone else could take over
    assert changes == [True, False]
    # why it stepped down is kept (and logged): the deadline and the last failure
    assert a.stepped_down.startswith("no renewal succeeded for 10.5 s (the renew deadline is 10 s)"), a.stepped_down
    assert "Unavailable: injected failure of get leases" in a.stepped_down, a.stepped_down


async def test_a_renewal_that_comes_late_says_the_writes_were_refused_meanwhile(
        caplog: pytest.LogCaptureFixture) -> None:
    backend = MemoryBackend()
    clock = Clock()
    a = LeaderElector(backend, identity="a", clock=clock, **LEASE)
    get_lease = backend.get_lease
    slow = [False]

    async def late_get_lease(namespace: str, name: str) -> dict[str, object] | None:
        if slow[0]:  # this renewal's read takes longer than the renew deadline, and then succeeds
            slow[0] = False
            clock.now += LEASE["renew_deadline"] + 1
        return await get_lease(namespace, name)

    backend.get_lease = late_get_lease  # type: ignore[method-assign]
    async with running(a):
        await wait_for(lambda: a.is_leader)
        slow[0] = True
        await wait_for(lambda: not slow[0])
        await wait_for(lambda: a.may_write())  # renewed: it writes again, still the leader
        assert a.is_leader and a.transitions == 1
    assert any("writes were refused meanwhile" in r.getMessage() for r in caplog.records), caplog.text


async def test_release_hands_over_without_waiting() -> None:
    backend = MemoryBackend()
    a = LeaderElector(backend, identity="a", clock=Clock(), **LEASE)
    b = LeaderElector(backend, identity="b", clock=Clock(), **LEASE)
    async with running(a) as ta:
        await settled(a.leading.wait())
        ta.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ta
        await a.release()
        async with running(b):
            await settled(b.leading.wait())


def test_durations_must_be_ordered() -> None:
    with pytest.raises(ValueError):
        LeaderElector(MemoryBackend(), identity="a", lease_duration=1, renew_deadline=2, retry_period=0.1)


async def test_fence_closes_before_the_lease_can_expire() -> None:
    """Between a leader's last renewal and its next, its own clock says when others may take over:
    from ``renew_deadline`` after the renewal was sent, it may not write, though it still believes
    it leads (its loop has not run again: the SIGSTOP of issue 12)."""
    from devshare.model.allocation import PodAllocation
    from devshare.model.request import PodRequest
    from devshare.server.extender.extender import Extender
    from support.kube import Following

    now = [100.0]
    backend = MemoryBackend()
    timing = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 5.0}  # no renewal during the test
    a = LeaderElector(backend, identity="a", clock=lambda: now[0], **timing)
    async with running(a):
        await settled(a.leading.wait())
        assert a.may_write() and a.fence() is None
        now[0] += 9.9
        assert a.may_write()
        now[0] += 0.1  # the renew deadline since the renewal was sent: another replica may lead soon
        assert a.is_leader and not a.may_write()
        reason = a.fence()
        assert reason is not None and reason.startswith("not the leader") and "renew deadline" in reason

        cache = Following(backend)
        binder = Extender(cache.lifecycle, backend, cache.cluster, leadership=a).binder
        error, _ = await binder.write(PodRequest(namespace="default", name="p", uid="uid"), "node-0",
                                      PodAllocation(node="node-0"), {"a": "b"}, None)
        assert error.startswith("not the leader") and "nothing was written" in error
        assert backend.store.get("pods", "default/p") is None  # no Binding attempted (it would 404)


# ---- LeaseFollower: the extender leads while the kube-scheduler of its own pod holds that Lease ----

def _scheduler_lease(holder: str, renewed: float, duration: int = 15) -> dict[str, object]:
    from devshare.kube.leader import micro_time

    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "devshare-scheduler", "namespace": "devshare-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": micro_time(renewed)}}


async def test_the_follower_leads_only_while_its_own_kube_scheduler_holds_a_fresh_lease() -> None:
    from devshare.kube.leader import LeaseFollower

    backend = MemoryBackend()
    clock = Clock()
    clock.now = 1_700_000_000.0  # the wall clock kube-scheduler's renewTime is written with
    pod = "devshare-scheduler-5d8c7b9f4-x7k2p"
    follower = LeaseFollower(backend, pod_name=pod, clock=clock)
    assert await follower.check() is not None and not follower.is_leader  # no Lease yet
    await backend.create_lease("devshare-system", _scheduler_lease(f"{pod}_3f0c9a", clock.now))
    assert await follower.check() is None and follower.is_leader and follower.may_write()
    clock.now += 9.9  # two thirds of the 15 s lease: still safe to write
    assert follower.may_write()
    clock.now += 0.2  # beyond: another kube-scheduler may take over soon; no write goes out
    reason = follower.fence()
    assert reason is not None and "last renewed its Lease 10.1 s ago" in reason
    assert await follower.check() is not None and not follower.is_leader
    # another pod whose name starts with this one's is not this pod's kube-scheduler
    lease = await backend.get_lease("devshare-system", "devshare-scheduler")
    assert lease is not None
    await backend.replace_lease("devshare-system", {**lease, **_scheduler_lease(f"{pod}2_77aa", clock.now)})
    reason = await follower.check()
    assert reason is not None and f"held by {pod}2_77aa" in reason


async def test_checks_that_need_a_fresh_read_at_once_share_one() -> None:
    """Fifty binds finding the last read too old at the same moment make one read of the Lease, not
    fifty; a read that fails fails each of them with the reason."""
    from devshare.kube.errors import BackendError
    from devshare.kube.leader import LeaseFollower

    backend = MemoryBackend()
    clock = Clock()
    clock.now = 1_700_000_000.0
    pod = "devshare-scheduler-5d8c7b9f4-x7k2p"
    await backend.create_lease("devshare-system", _scheduler_lease(f"{pod}_3f0c9a", clock.now))
    read = backend.get_lease
    fail = False

    async def slow_read(namespace: str, name: str) -> dict[str, object] | None:
        await asyncio.sleep(0.01)  # an API server round trip: the other checks come meanwhile
        if fail:
            raise BackendError("connection refused")
        return await read(namespace, name)

    backend.get_lease = slow_read  # type: ignore[method-assign]
    follower = LeaseFollower(backend, pod_name=pod, clock=clock, retry_period=1.0)
    assert await asyncio.gather(*(follower.check() for _ in range(50))) == [None] * 50
    assert follower.reads == 1 and follower.is_leader
    clock.now += 1.5
    fail = True
    reasons = await asyncio.gather(*(follower.check() for _ in range(50)))
    assert follower.reads == 2
    assert all(r is not None and "could not be read (connection refused)" in r for r in reasons)


def test_a_long_pod_name_is_matched_as_the_kubelet_cuts_it_into_a_hostname() -> None:
    from devshare.kube.leader import LeaseFollower, pod_hostname

    name = "a" * 60 + "-b-cdef"  # 67 characters: the hostname is its first 63, without the trailing "-"
    assert pod_hostname(name) == "a" * 60 + "-b"
    assert LeaseFollower(MemoryBackend(), pod_name=name).prefix == "a" * 60 + "-b_"
    with pytest.raises(ValueError, match="pod-name"):
        LeaseFollower(MemoryBackend(), pod_name="")


async def test_the_followers_fence_reads_the_lease_at_most_once_a_retry_period_while_it_may_write() -> None:
    """A bind's fence does not cost a read of the Lease when the last read, at most retry_period old,
    let this extender write (no other kube-scheduler can take a Lease before its duration has passed
    since the renewal that read saw); a refusal, or an older read, reads the Lease afresh."""
    from devshare.kube.leader import LeaseFollower

    backend = MemoryBackend()
    clock = Clock()
    clock.now = 1_700_000_000.0
    pod = "devshare-scheduler-5d8c7b9f4-x7k2p"
    follower = LeaseFollower(backend, pod_name=pod, clock=clock, retry_period=1.0)
    await backend.create_lease("devshare-system", _scheduler_lease(f"{pod}_3f0c9a", clock.now))
    assert await follower.check() is None and follower.reads == 1
    for _ in range(5):  # binds within the retry period: judged from that read
        clock.now += 0.15
        assert await follower.check() is None
    assert follower.reads == 1
    clock.now += 0.45  # 1.2 s since the read: read again
    assert await follower.check() is None and follower.reads == 2
    # the Lease went to another pod's kube-scheduler (a release): seen at the next read at the latest,
    # and from then on every check reads afresh until this pod's kube-scheduler holds it again
    lease = await backend.get_lease("devshare-system", "devshare-scheduler")
    assert lease is not None
    await backend.replace_lease("devshare-system", {**lease, **_scheduler_lease("other-pod_77aa", clock.now)})
    clock.now += 1.1
    reason = await follower.check()
    assert reason is not None and "held by other-pod_77aa" in reason and not follower.is_leader
    reads = follower.reads
    assert await follower.check() is not None and follower.reads == reads + 1
    # an old renewal is refused from the cached read too, without waiting for the next one
    await backend.replace_lease("devshare-system", {**lease, **_scheduler_lease(f"{pod}_3f0c9a", clock.now)})
    assert await follower.check() is None
    clock.now += 10.1
    assert follower.fence() is not None and await follower.check() is not None


# ---- Leases that lie (issue 37, item 5): a renewTime in the future, a duration that is not one ----

POD = "devshare-scheduler-5d8c7b9f4-x7k2p"


async def test_a_renewtime_in_the_future_goes_stale_by_the_followers_own_clock() -> None:
    """A forged Lease (or a clock set back) renewed an hour from now: the follower counts its age from
    when it first read that renewTime, so it stops binding once the deadline has passed on its clock."""
    from devshare.kube.leader import LeaseFollower

    backend = MemoryBackend()
    clock = Clock()
    clock.now = 1_700_000_000.0
    follower = LeaseFollower(backend, pod_name=POD, clock=clock, retry_period=1.0)
    await backend.create_lease("devshare-system", _scheduler_lease(f"{POD}_3f0c9a", clock.now + 3600))
    assert await follower.check() is None and follower.is_leader  # as if renewed now
    clock.now += 9.9  # two thirds of the 15 s lease, by this clock, since the renewTime was first seen
    assert await follower.check() is None
    clock.now += 0.2
    reason = await follower.check()
    assert reason is not None and "last renewed its Lease 10.1 s ago" in reason and not follower.is_leader
    clock.now += 3600  # nothing renewed meanwhile: still stale
    assert await follower.check() is not None
    # a renewal (a new renewTime, even in the future again) counts from when it is seen
    lease = await backend.get_lease("devshare-system", "devshare-scheduler")
    assert lease is not None
    await backend.replace_lease("devshare-system", {**lease, **_scheduler_lease(f"{POD}_3f0c9a", clock.now + 60)})
    assert await follower.check() is None


@pytest.mark.parametrize(("duration", "words"), [
    (0, "leaseDurationSeconds 0, which is not a positive number of seconds"),
    (-5, "leaseDurationSeconds -5, which is not a positive number of seconds"),
    (None, "has no leaseDurationSeconds"),
])
async def test_a_lease_without_a_positive_duration_is_refused_with_one_log_line(
        duration: int | None, words: str, caplog: pytest.LogCaptureFixture) -> None:
    from devshare.kube.leader import LeaseFollower

    backend = MemoryBackend()
    clock = Clock()
    clock.now = 1_700_000_000.0
    lease = _scheduler_lease(f"{POD}_3f0c9a", clock.now)
    spec = lease["spec"]
    assert isinstance(spec, dict)
    if duration is None:
        del spec["leaseDurationSeconds"]
    else:
        spec["leaseDurationSeconds"] = duration
    await backend.create_lease("devshare-system", lease)
    follower = LeaseFollower(backend, pod_name=POD, clock=clock, retry_period=1.0)
    with caplog.at_level("WARNING", logger="devshare.kube.leader"):
        for _ in range(3):
            reason = await follower.check()
            assert reason is not None and words in reason and not follower.is_leader
            clock.now += 2  # each check reads the Lease again
    said = [r.getMessage() for r in caplog.records if words in r.getMessage()]
    assert len(said) == 1 and "leaderElection.leaseDuration" in said[0], said
    lease = await backend.get_lease("devshare-system", "devshare-scheduler")
    assert lease is not None
    await backend.replace_lease("devshare-system", {**lease, **_scheduler_lease(f"{POD}_3f0c9a", clock.now)})
    assert await follower.check() is None  # repaired: it binds again


async def test_an_elector_never_takes_a_lease_sooner_than_its_own_duration_whatever_the_lease_says(
        caplog: pytest.LogCaptureFixture) -> None:
    from devshare.kube.leader import micro_time

    backend = MemoryBackend()
    clock = Clock()
    await backend.create_lease("devshare-system", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "devshare-extender", "namespace": "devshare-system"},
        "spec": {"holderIdentity": "x", "leaseDurationSeconds": -5, "renewTime": micro_time()}})
    b = LeaderElector(backend, identity="b", namespace="devshare-system", clock=clock, **LEASE)
    with caplog.at_level("WARNING", logger="devshare.kube.leader"):
        assert not await b.try_acquire_or_renew()
        clock.now += LEASE["lease_duration"] - 1
        assert not await b.try_acquire_or_renew()  # -5 s would have let it take over at once
    said = [r.getMessage() for r in caplog.records if "leaseDurationSeconds -5" in r.getMessage()]
    assert len(said) == 1 and "waits its own lease duration (15 s)" in said[0], said
    clock.now += 2
    assert await b.try_acquire_or_renew()
    lease = await backend.get_lease("devshare-system", "devshare-extender")
    assert lease is not None and lease["spec"]["leaseDurationSeconds"] == 15
