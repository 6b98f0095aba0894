"""The extender's own Prometheus collectors (server/extender/collectors.py): what its parts count,
read at scrape time, under the names the dashboards use."""

from __future__ import annotations

import asyncio
import copy
import platform
import time
from types import SimpleNamespace
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devshare import __version__
from devshare.config import parse_config
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.kube.memory import MemoryBackend
from devshare.server.dra.metrics import DraCollector
from devshare.server.eventloop import StallWatch
from devshare.server.extender.collectors import LaneCollector, RequeueCollector, StallCollector, SyncCollector
from devshare.server.extender.requeue import Requeue
from devshare.server.extender.serve import ExtenderOptions
from devshare.server.tls import TLSCollector
from support import REPO
from support.extender import Switch, cluster, pod, post, running

PEERS = REPO / "tests" / "fixtures" / "peers"
QUOTAS = parse_config({"apiVersion": "devshare.io/v1alpha1", "kind": "DevshareConfiguration",
                       "quotas": {"default": {"gpuCore": 200, "gpuMemory": "64Gi"}}})


def scrape(*collectors: object) -> dict[str, float]:
    registry = CollectorRegistry()
    for c in collectors:
        registry.register(c)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


class NoPending:
    def pending_pod(self, key: str) -> None:
        return None


def test_the_counters_are_read_at_scrape_time() -> None:
    watched = WatchedCluster(Lifecycle(Scheduler(ClusterState())), clock=time.monotonic)
    requeue = Requeue(cluster(), NoPending(), Switch())  # type: ignore[arg-type]
    stalls = StallWatch("x")
    collectors = (SyncCollector(watched), RequeueCollector(requeue), StallCollector(stalls))
    assert scrape(*collectors)["devshare_extender_overbooked_allocations_total"] == 0
    watched.overbooked, watched.malformed, requeue.nudged, stalls.stalls = 2, 3, 4, 5
    got = scrape(*collectors)
    assert got["devshare_extender_overbooked_allocations_total"] == 2
    assert got["devshare_extender_malformed_allocations_total"] == 3
    assert got["devshare_extender_requeue_nudges_total"] == 4
    assert got["devshare_extender_loop_stalls_total"] == 5
    assert got["devshare_extender_trade_writes_parked"] == 0


async def test_peers_pods_and_unreadable_inventories_on_metrics_and_inspect() -> None:
    """Issue 36: the pods other schedulers placed that devshare counts, and a peer's inventory it
    could not read, were in no metric; the unreadable inventory was only in the log."""
    objs = [d for d in yaml.safe_load_all((PEERS / "hami.yaml").read_text()) if d]
    bad = copy.deepcopy(next(d for d in objs if d["metadata"]["name"] == "hami-3"))
    bad["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "[not json"
    backend = MemoryBackend.from_objects([bad if d["metadata"]["name"] == "hami-3" else d for d in objs])
    async with running(backend) as (client, runtime):
        text = await (await client.get("/metrics")).text()
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
        counted = [p for p in runtime.state.inspect()["placedByPeers"] if p["by"] == "hami"]
        assert counted and got[("devshare_peer_pods", (("scheduler", "hami"),))] == len(counted)
        unsure = [p for p in counted if p["problems"]]  # the pod on hami-3: its node has no inventory now
        assert unsure and got[("devshare_peer_pods_conservative", (("scheduler", "hami"),))] == len(unsure)
        assert got[("devshare_inventories_unreadable", (("source", "hami"),))] == 1
        inspect = await (await client.get("/inspect")).json()
        [unread] = inspect["unreadableInventories"]
        assert unread["node"] == "hami-3" and unread["source"] == "hami" and unread["problem"]


# words of the code that mean nothing to an operator reading /metrics (issue 40)
JARGON = (".py", "aiohttp", "watermark", "occupancy", " lane", "verbs")


async def test_help_texts_are_written_for_operators_and_documented() -> None:
    """Issue 40: one HELP text named a source file. Every family a live extender exports (with those
    registered only on a plain-HTTP port, with DRA, or over TLS) says what it counts in an operator's
    words, and docs/metrics.md lists it."""
    backend = cluster(nodes=1, gpus=1, pods=[pod("p", core=30)])
    lanes: Any = SimpleNamespace(served=1, handed=2, connections=3)
    dra: Any = SimpleNamespace(allocated=1, gates_lifted=1, refused=0, conflicts=0, released=0, overbooked=0,
                               invalid=0, synced=asyncio.Event(), _waiting={})
    tls: Any = SimpleNamespace(reloads=1, failures={"expired": 1}, not_after=("x", 2e9))
    async with running(backend, ExtenderOptions(config=QUOTAS)) as (client, runtime):
        for extra in (LaneCollector(lanes), DraCollector(dra), TLSCollector(tls)):
            runtime.extender.metrics.registry.register(extra)
        text = await (await client.get("/metrics")).text()
    helps = [line for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(helps) > 40
    documented = (REPO / "docs" / "metrics.md").read_text()
    for line in helps:
        name, words = line.split(" ", 3)[2:]
        assert not any(word in line for word in JARGON), line
        assert len(words) > 20 and (words[0].isupper() or words[0].isdigit()), line  # a sentence, not a label
        assert f"`{name.removesuffix('_total')}" in documented, f"{name} is not in docs/metrics.md"


async def test_no_created_series_and_the_build_is_told() -> None:
    """Issue 40: every counter and histogram had a _created series; there was no devshare_build_info."""
    backend = cluster(nodes=1, gpus=1, pods=[pod("p", core=30)])
    async with running(backend) as (client, _):
        await post(client, "/bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p",
                                     "Node": "node-0"})
        text = await (await client.get("/metrics")).text()
    assert "_created" not in text
    [info] = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "devshare_build_info"]
    assert info.value == 1 and info.labels == {"version": __version__, "python": platform.python_version()}
