"""Leader fencing at bind time (issue 12): extender A leads, is stopped past its lease (its event loop
frozen, as SIGSTOP would), B takes the lease and binds p1 (60% of the only GPU); a bind of p2 (60%)
already queued in A's socket is served when A resumes. It must be refused: a leader whose lease
may have expired does not write. Against the fake API server, both extenders through the API.

Time is the test's: both electors run on a clock that moves only when the test moves it (issue 37,
item 9), so a loaded machine cannot cost A its lease before the freeze, and A's watch delivers nothing
until the test has its answer (A cannot learn of B's bind but by fencing)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from devshare.kube.leader import LeaderElector
from devshare.kube.rest import KubeClient
from devshare.server.extender.serve import RUNTIME, ExtenderOptions, build_app
from fakeapi.plugin import fake_api, fake_kubeconfig  # noqa: F401
from fakeapi.server import FakeApiServer
from support.extender import device, node, pod, running
from support.kubescheduler import post
from support.server import ServerThread
from support.waiting import FAILSAFE, settled
from support.waiting import eventually as until

# lease duration, renew deadline, retry period (seconds; the durations on the test's clock, the retry
# period real: how often each elector looks at the Lease)
TIMING = (3.0, 1.8, 0.3)


class Clock:
    """A monotonic clock that moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class HeldWatch:
    """A backend whose watch events are held until ``release`` is set (a slow watch: A does not learn of
    B's bind before it serves its queued one, so only fencing can stop it)."""

    def __init__(self, inner: KubeClient) -> None:
        self.inner = inner
        self.release = threading.Event()  # set from the test's thread; A's loop runs in its own

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def watch(self, kind: Any, resource_version: str) -> AsyncIterator[Any]:
        async for ev in self.inner.watch(kind, resource_version):
            while not self.release.is_set():
                await asyncio.sleep(0.05)
            yield ev


def bind_body(name: str) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-default-{name}", "Node": "node-0"}


async def test_a_deposed_leader_does_not_serve_a_queued_bind(fake_api: FakeApiServer,  # noqa: F811
                                                              fake_kubeconfig: Path) -> None:  # noqa: F811
    for obj in (node("node-0"), device("node-0", 1), pod("p1", core=60), pod("p2", core=60)):
        fake_api.put(obj)
    options = {"leader_election": True, "lease_timing": TIMING}
    clock = Clock()
    held = HeldWatch(KubeClient.connect(fake_kubeconfig))
    a_app = build_app(held, ExtenderOptions(identity="a", **options), clock=clock)  # type: ignore[arg-type]
    a = await asyncio.to_thread(ServerThread, a_app)  # its own event loop, in a thread: the one we freeze
    frozen, thawed = threading.Event(), threading.Event()
    try:
        a_runtime = a_app[RUNTIME]
        elector_a: LeaderElector = a_runtime.elector  # type: ignore[assignment]
        await until(lambda: elector_a.is_leader and a_runtime.informer.is_synced)
        b_options = ExtenderOptions(identity="b", **options)  # type: ignore[arg-type]
        async with running(KubeClient.connect(fake_kubeconfig), b_options, clock=clock) as (b_client, b_runtime):
            elector_b: LeaderElector = b_runtime.elector  # type: ignore[assignment]
            await asyncio.sleep(3 * TIMING[2])  # B looks at the Lease: live, on a clock that stands still
            assert elector_a.is_leader and not elector_b.is_leader


            def freeze() -> None:  # SIGSTOP: nothing of A runs until the test lets it
                frozen.set()
                thawed.wait(FAILSAFE)

            a.loop.call_soon_threadsafe(freeze)
            assert await asyncio.to_thread(frozen.wait, FAILSAFE)
            queued = asyncio.ensure_future(asyncio.to_thread(post, a.port, "/bind", bind_body("p2"), timeout=30))

            def b_took_over() -> bool:  # time passes while A is frozen: its Lease runs out for B
                if not elector_b.is_leader:  # (in steps well within B's renew deadline: B binds once it leads)
                    clock.now += TIMING[1] / 4
                return elector_b.is_leader

            await until(b_took_over)
            r = await b_client.post("/bind", json=bind_body("p1"))
            assert (await r.json()) == {"Error": ""}

            thawed.set()
            answer = await settled(queued)  # A resumes and serves the queued bind
            assert answer["Error"].startswith("not the leader"), answer
    finally:
        thawed.set()
        held.release.set()
        await asyncio.to_thread(a.close)
    bound = {k: p["spec"].get("nodeName") for k, p in fake_api.store.objects["pods"].items()}
    assert bound == {"default/p1": "node-0", "default/p2": None}  # the GPU holds 60%, not 120%
