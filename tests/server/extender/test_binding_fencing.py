"""Leader fencing at bind time (issue 12): extender A leads, is stopped past its lease (its event loop
frozen, as SIGSTOP would), B takes the lease and binds p1 (60% of the only GPU); a bind of p2 (60%)
already queued in A's socket is served when A resumes. It must be refused: a leader whose lease
may have expired does not write. Against the fake API server, both extenders through the API."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from devshare.kube.leader import LeaderElector
from devshare.kube.rest import KubeClient
from devshare.server.extender.serve import RUNTIME, ExtenderOptions, build_app
from fakeapi.plugin import fake_api, fake_kubeconfig  # noqa: F401
from fakeapi.server import FakeApiServer
from support.extender import device, node, pod, running
from support.server import ServerThread
from support.waiting import FAILSAFE, settled
from support.waiting import eventually as until

# lease duration, renew deadline, retry period (seconds): long enough that a loaded machine's pauses do
# not cost A its lease before the test freezes it (the leader renews every 0.3 s and has 1.8 s to)
TIMING = (3.0, 1.8, 0.3)


class LaggingWatch:
    """A backend whose watch events arrive ``lag`` seconds late (a slow watch: A does not learn of
    B's bind before it serves its queued one, so only fencing can stop it; ``lag`` well beyond A's
    freeze of 2.5 lease durations)."""

    def __init__(self, inner: KubeClient, lag: float) -> None:
        self.inner = inner
        self.lag = lag

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def watch(self, kind: Any, resource_version: str) -> AsyncIterator[Any]:
        async for ev in self.inner.watch(kind, resource_version):
            await asyncio.sleep(self.lag)
            yield ev


def post(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def bind_body(name: str) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-default-{name}", "Node": "node-0"}


async def test_a_deposed_leader_does_not_serve_a_queued_bind(fake_api: FakeApiServer,  # noqa: F811
                                                              fake_kubeconfig: Path) -> None:  # noqa: F811
    for obj in (node("node-0"), device("node-0", 1), pod("p1", core=60), pod("p2", core=60)):
        fake_api.put(obj)
    options = {"leader_election": True, "lease_timing": TIMING}
    lagging = LaggingWatch(KubeClient.connect(fake_kubeconfig), lag=15.0)
    a_app = build_app(lagging, ExtenderOptions(identity="a", **options))  # type: ignore[arg-type]
    a = await asyncio.to_thread(ServerThread, a_app)  # its own event loop, in a thread: the one we freeze
    try:
        a_runtime = a_app[RUNTIME]
        elector_a: LeaderElector = a_runtime.elector  # type: ignore[assignment]
        await until(lambda: elector_a.is_leader and a_runtime.informer.is_synced)
        b_options = ExtenderOptions(identity="b", **options)  # type: ignore[arg-type]
        async with running(KubeClient.connect(fake_kubeconfig), b_options) as (b_client, b_runtime):
            elector_b: LeaderElector = b_runtime.elector  # type: ignore[assignment]
            await asyncio.sleep(3 * TIMING[2])
            assert elector_a.is_leader and not elector_b.is_leader

            frozen = threading.Event()

            def freeze() -> None:  # SIGSTOP: nothing of A runs for 2.5 lease durations
                frozen.set()
                time.sleep(2.5 * TIMING[0])

            a.loop.call_soon_threadsafe(freeze)
            assert await asyncio.to_thread(frozen.wait, FAILSAFE)
            queued = asyncio.ensure_future(asyncio.to_thread(post, a.port, "/bind", bind_body("p2")))

            await until(lambda: elector_b.is_leader)  # B takes the expired lease and binds p1
            r = await b_client.post("/bind", json=bind_body("p1"))
            assert (await r.json()) == {"Error": ""}

            answer = await settled(queued)  # A resumes and serves the queued bind
            assert answer["Error"].startswith("not the leader"), answer
    finally:
        await asyncio.to_thread(a.close)
    bound = {k: p["spec"].get("nodeName") for k, p in fake_api.store.objects["pods"].items()}
    assert bound == {"default/p1": "node-0", "default/p2": None}  # the GPU holds 60%, not 120%
