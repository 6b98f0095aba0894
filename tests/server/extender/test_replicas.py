"""Several scheduler replicas, each a kube-scheduler with its own sidecar extender (issue 12), against
the fake API server. Each replica's "kube-scheduler" is a client-go style elector on the scheduler's
Lease with identity ``<pod name>_<uuid>``, as kube-scheduler writes it; its extender follows that
Lease (``--follow-lease``). Whichever kube-scheduler is active must have its binds served by its own
sidecar, through a graceful failover, a leader frozen past its lease (SIGSTOP: a bind queued in its
socket meanwhile must be refused when it resumes) and a killed leader; a card is never over-booked."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from devshare.kube.leader import LeaderElector, LeaseFollower
from devshare.kube.rest import KubeClient
from devshare.model.codecs import parse_allocation
from devshare.server.extender.serve import RUNTIME, ExtenderOptions, build_app
from fakeapi.plugin import fake_api, fake_kubeconfig  # noqa: F401
from fakeapi.server import FakeApiServer
from support.extender import device, node, pod
from support.server import ServerThread
from support.waiting import eventually_in_thread as wait

TIMING = (1.0, 0.6, 0.1)  # the kube-schedulers' lease duration, renew deadline, retry period (seconds)
LEASE = "devshare-scheduler"


class Replica:
    """One scheduler pod: its kube-scheduler's elector and its extender, on one event loop in one
    thread (freezing the loop freezes the whole pod, as SIGSTOP of both containers would)."""

    def __init__(self, name: str, kubeconfig: Path) -> None:
        self.name = name
        options = ExtenderOptions(follow_lease=LEASE, pod_name=name, follow_period=0.05)
        self.app = build_app(KubeClient.connect(kubeconfig), options)
        self.server = ServerThread(self.app)
        self.sched_backend = KubeClient.connect(kubeconfig)
        self.elector = LeaderElector(self.sched_backend, identity=f"{name}_{uuid.uuid4()}", name=LEASE,
                                     lease_duration=TIMING[0], renew_deadline=TIMING[1], retry_period=TIMING[2])
        self.task = asyncio.run_coroutine_threadsafe(self._campaign(), self.server.loop)
        self.closed = False

    async def _campaign(self) -> None:
        await self.elector.run()

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def follower(self) -> LeaseFollower:
        f = self.app[RUNTIME].elector
        assert isinstance(f, LeaseFollower)
        return f

    @property
    def synced(self) -> bool:
        return self.app[RUNTIME].informer.is_synced

    def freeze(self, seconds: float) -> None:
        """SIGSTOP for ``seconds``: nothing of this pod runs."""
        frozen = threading.Event()

        def stop() -> None:
            frozen.set()
            time.sleep(seconds)

        self.server.loop.call_soon_threadsafe(stop)
        assert frozen.wait(5)

    def close(self, *, release: bool) -> None:
        """Stop the pod: ``release`` as kube-scheduler does on SIGTERM, or not at all (SIGKILL)."""
        if self.closed:
            return
        self.closed = True
        self.task.cancel()
        if release:
            asyncio.run_coroutine_threadsafe(self.elector.release(), self.server.loop).result(10)
        asyncio.run_coroutine_threadsafe(self.sched_backend.close(), self.server.loop).result(10)
        self.server.close()


def post(port: int, body: dict[str, Any]) -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/bind", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return str(json.loads(r.read())["Error"])


def bind(replica: Replica, name: str, node_name: str) -> str:
    return post(replica.port, {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-default-{name}",
                               "Node": node_name})


def active(replicas: list[Replica]) -> Replica:
    """The replica whose kube-scheduler leads, once its extender knows it (and only it), every live
    extender synced (one still listing answers "not ready" whoever leads: on a loaded machine that
    takes a while)."""
    def one() -> Replica | None:
        live = [r for r in replicas if not r.closed]
        leaders = [r for r in live if r.elector.is_leader]
        if len(leaders) == 1 and leaders[0].follower.may_write() and all(r.synced for r in live):
            others = [r for r in live if r is not leaders[0]]
            if not any(r.follower.may_write() for r in others):
                return leaders[0]
        return None
    found: Replica = wait(one, what="one active kube-scheduler whose extender alone leads")
    return found


def core_by_card(fake: FakeApiServer) -> dict[tuple[str, int], int]:
    used: dict[tuple[str, int], int] = {}
    for p in fake.store.objects["pods"].values():
        raw = (p["metadata"].get("annotations") or {}).get("devshare.io/allocation")
        if not raw or not p["spec"].get("nodeName"):
            continue
        for c in parse_allocation(raw).containers:
            for d in c.devices:
                card = (p["spec"]["nodeName"], d.minor)
                used[card] = used.get(card, 0) + d.core_milli // 10
    return used


@pytest.mark.parametrize("n", [2, 3])
async def test_the_active_kube_scheduler_has_its_binds_served_through_every_failover(
        n: int, fake_api: FakeApiServer, fake_kubeconfig: Path) -> None:  # noqa: F811
    # the fake API server runs on this loop; the replicas (and the test's blocking calls) in threads
    await asyncio.to_thread(scenario, n, fake_api, fake_kubeconfig)


def scenario(n: int, fake_api: FakeApiServer, fake_kubeconfig: Path) -> None:  # noqa: F811
    for obj in (node("sigstop"), device("sigstop", 1), node("main"), device("main", 2)):
        fake_api.put(obj)
    for i in range(12):
        fake_api.put(pod(f"p{i}", core=30))
    fake_api.put(pod("first", core=60))
    fake_api.put(pod("queued", core=60))
    made = 0

    def replica() -> Replica:
        nonlocal made
        made += 1
        return Replica(f"devshare-scheduler-7d9f-{made}", fake_kubeconfig)

    replicas = [replica() for _ in range(n)]
    served: list[str] = []
    try:
        leader = active(replicas)
        # the extenders beside the standby kube-schedulers refuse: they do not lead
        for r in replicas:
            if r is not leader:
                assert bind(r, "p0", "main").startswith("not the leader")
        assert bind(leader, "p0", "main") == ""
        served.append("p0")

        # SIGSTOP of the whole leading pod past its lease; a bind waits in its socket meanwhile
        stopped = leader
        stopped.freeze(2.5 * TIMING[0])
        queued = threading.Thread(target=lambda: served.append("queued" if bind(stopped, "queued", "sigstop") == ""
                                                               else "queued refused"))
        queued.start()
        leader = active([r for r in replicas if r is not stopped])
        assert bind(leader, "first", "sigstop") == ""
        served.append("first")
        queued.join(20)
        assert served[-1] == "queued refused", served
        wait(lambda: not stopped.elector.is_leader, what="the resumed kube-scheduler stepping down")
        # kube-scheduler exits when it loses its lease; its pod is replaced
        stopped.close(release=False)
        replicas = [r for r in replicas if r is not stopped] + [replica()]

        # the active kube-scheduler serves binds through its sidecar
        for name in ("p1", "p2"):
            assert bind(active(replicas), name, "main") == ""

        # SIGKILL of the leading pod: nothing is released; another takes over once the lease lapses
        killed = active(replicas)
        killed.close(release=False)
        replicas = [r for r in replicas if r is not killed] + [replica()]
        leader = active(replicas)
        assert leader is not killed
        assert bind(leader, "p3", "main") == ""

        # a graceful failover (SIGTERM: the lease is released, the next takes over at once)
        stepping = active(replicas)
        stepping.close(release=True)
        replicas = [r for r in replicas if r is not stepping] + [replica()]
        assert bind(active(replicas), "p4", "main") == ""
    finally:
        for r in replicas:
            r.close(release=True)
    bound = {k.split("/")[1] for k, p in fake_api.store.objects["pods"].items() if p["spec"].get("nodeName")}
    assert bound == {"p0", "p1", "p2", "p3", "p4", "first"}
    used = core_by_card(fake_api)
    assert used[("sigstop", 0)] == 60  # not 120: the deposed leader's queued bind was refused
    assert all(v <= 100 for v in used.values()), used
