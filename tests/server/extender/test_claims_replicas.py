"""Two extenders that both believe they lead (no election: two run by hand, or one paused past its
lease) bind conflicting pods to the same cards at the same moment, against the fake API server. Their
watches are blind (neither ever hears of the other's binds: the worst lag there is), and every API
request of theirs waits a random moment, so each round interleaves their reads, claims and Bindings
differently. Only the claim ledger stands between them and an over-booked card (issue 12): no card
ever holds more than it has, every bound pod's claim is in the ledger, and one of them wins."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from devshare.kube.ledger import ClaimLedger
from devshare.kube.rest import KubeClient
from devshare.model.codecs import decode_allocation
from devshare.server.extender.serve import ExtenderOptions
from fakeapi.plugin import fake_api, fake_kubeconfig  # noqa: F401
from fakeapi.server import FakeApiServer
from support.extender import GiB, bind, device, node, pod, running

ROUNDS = 40
GPUS = 2


class Interleaved:
    """A backend whose watches never deliver anything after the initial list, and whose every other
    request first waits a random moment (up to ``jitter`` seconds)."""

    def __init__(self, inner: KubeClient, rng: random.Random, jitter: float = 0.004) -> None:
        self.inner = inner
        self.rng = rng
        self.jitter = jitter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in ("namespace", "close", "list") or not callable(attr):
            return attr

        async def delayed(*args: Any, **kw: Any) -> Any:
            await asyncio.sleep(self.rng.random() * self.jitter)
            return await attr(*args, **kw)

        return delayed

    async def watch(self, kind: Any, resource_version: str) -> AsyncIterator[Any]:
        await asyncio.Event().wait()  # blind: nothing ever arrives
        yield  # pragma: no cover


def card_usage(fake: FakeApiServer) -> dict[tuple[str, int], list[int]]:
    used: dict[tuple[str, int], list[int]] = {}
    for p in fake.store.objects["pods"].values():
        alloc = decode_allocation(p["metadata"].get("annotations") or {})
        if alloc is None or not p["spec"].get("nodeName"):
            continue
        assert alloc.node == p["spec"]["nodeName"]
        for _, g in alloc.grants():
            acc = used.setdefault((alloc.node, g.minor), [0, 0])
            acc[0] += g.core_milli
            acc[1] += g.memory
    return used


async def check_ledgers(fake: FakeApiServer, backend: KubeClient) -> None:
    """Every bound pod's allocation is claimed in the ledger (what a replica whose watch lags counts
    before it writes; blind watches never see a pod bound, so no claim leaves as bound)."""
    ledger = await ClaimLedger(backend).read()
    for key, p in fake.store.objects["pods"].items():
        alloc = decode_allocation(p["metadata"].get("annotations") or {})
        if alloc is None or not p["spec"].get("nodeName"):
            continue
        claim = ledger.claims.get(key)
        assert claim is not None and claim.allocation == alloc and claim.uid == p["metadata"]["uid"], key


@pytest.mark.parametrize("seed", [1, 2])
async def test_two_leading_extenders_never_over_book_a_card(seed: int, fake_api: FakeApiServer,  # noqa: F811
                                                            fake_kubeconfig: Path) -> None:  # noqa: F811
    rng = random.Random(seed)
    plan: list[tuple[str, list[tuple[str, int]], list[tuple[str, int]]]] = []
    for i in range(ROUNDS):
        fake_api.put(node(f"r{i}"))
        fake_api.put(device(f"r{i}", GPUS, 16 * GiB))
        sizes = [rng.choice([30, 50, 60, 60, 100]) for _ in range(4)]
        pods = [(f"r{i}-{j}", size) for j, size in enumerate(sizes)]
        for name, size in pods:
            fake_api.put(pod(name, core=size))
        a, b = pods[: rng.choice([1, 2])], pods[2: 2 + rng.choice([1, 2])]
        if rng.random() < 0.25:
            b = [a[0], *b[1:]]  # both are asked to bind the same pod
        plan.append((f"r{i}", a, b))

    opts = ExtenderOptions(leader_election=False)  # both always lead
    backends = [Interleaved(KubeClient.connect(fake_kubeconfig), random.Random(seed * 10 + k)) for k in (1, 2)]
    reader = KubeClient.connect(fake_kubeconfig)
    async with running(backends[0], opts) as (a_client, a), running(backends[1], opts) as (b_client, b):
        won = 0
        for node_name, a_pods, b_pods in plan:
            binds = [bind(a_client, name, node_name) for name, _ in a_pods]
            binds += [bind(b_client, name, node_name) for name, _ in b_pods]
            order = list(range(len(binds)))
            rng.shuffle(order)
            answers = await asyncio.gather(*(binds[k] for k in order))
            won += answers.count("")
            used = card_usage(fake_api)
            for (n, minor), (core, mem) in used.items():
                assert core <= 1000 and mem <= 16 * GiB, f"{n} gpu {minor}: {core / 10:g}% and {mem / GiB:g} GiB"
            assert "" in answers, answers  # one of them always wins the empty node
            refused = [x for x in answers if x]
            assert all("claim" in x or "does not fit" in x or "already" in x for x in refused), refused
        await check_ledgers(fake_api, reader)
        # the losers were refused because of the other's claims, found on a 409 or on reading
        assert a.claims is not None and b.claims is not None
        assert a.claims.counters.conflicts + b.claims.counters.conflicts > 0
        assert a.claims.counters.refused + b.claims.counters.refused > 0
    await reader.close()
    assert won >= ROUNDS
