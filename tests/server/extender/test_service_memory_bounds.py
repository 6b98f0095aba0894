"""The extender's caches are bounded by bytes, not entries (issue 12): many distinct large pods, or
many distinct long NodeNames lists, do not grow its memory past a fixed budget."""

from __future__ import annotations

import gc
import tracemalloc

import msgspec

from devshare.server.extender.extender import Extender
from devshare.server.extender.nodeset import NodeSets
from devshare.server.extender.wire import ExtenderArgs
from support.extender import cluster, pod
from support.kube import following

MiB = 2**20


async def synced_extender(nodes: int = 4) -> Extender:
    backend = cluster(nodes, gpus=2)
    async with following(backend) as f:
        return Extender(f.lifecycle, backend, f.cluster)


def retained_after(fn: object, count: int) -> int:
    """Bytes still allocated after ``count`` calls of ``fn(i)`` (whatever the calls kept alive)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            fn(i)  # type: ignore[operator]
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


async def test_many_distinct_large_pods_keep_memory_bounded() -> None:
    ext = await synced_extender()
    names = msgspec.json.encode(["node-0", "node-1"])
    filler = "x" * MiB

    def filter_one(i: int) -> None:
        p = pod(f"big-{i}", core=50, resource_version="1")
        p["metadata"]["annotations"] = {"filler": filler + str(i)}  # distinct 1 MiB bodies
        args = ExtenderArgs(pod=msgspec.Raw(msgspec.json.encode(p)), node_names=msgspec.Raw(names))
        assert ext.filter(args).error == ""

    kept = retained_after(filter_one, 60)  # 60 MiB of bodies, beyond the 32 MiB budget
    assert kept < 40 * MiB, f"{kept / MiB:.0f} MiB retained"


async def test_many_distinct_invalid_pods_with_huge_values_keep_memory_bounded() -> None:
    """An invalid request's message quotes the value: it must not keep megabytes per pod."""
    ext = await synced_extender()
    names = msgspec.json.encode(["node-0"])

    def filter_one(i: int) -> None:
        p = pod(f"bad-{i}", resource_version="1")
        p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "9" * MiB + f"x{i}"}}
        args = ExtenderArgs(pod=msgspec.Raw(msgspec.json.encode(p)), node_names=msgspec.Raw(names))
        reason = ext.filter(args).failed_and_unresolvable_nodes["node-0"]
        assert "invalid request" in reason and len(reason) < 4096, len(reason)

    kept = retained_after(filter_one, 60)
    assert kept < 40 * MiB, f"{kept / MiB:.0f} MiB retained"


async def test_many_distinct_long_node_name_lists_keep_memory_bounded() -> None:
    """16 lists of 20,000 names (the cache's entry limit) against a budget of 8 MiB (64 in production)."""
    ext = await synced_extender()
    ext.requests.nodesets = NodeSets(ext.state, budget=8 * MiB)
    body = msgspec.json.encode(pod("p", core=50, resource_version="1"))
    lists = [msgspec.json.encode(["node-0", "node-1", *(f"gone-{i}-{j:06d}" for j in range(20_000))])
             for i in range(16)]

    def filter_one(i: int) -> None:
        args = ExtenderArgs(pod=msgspec.Raw(body), node_names=msgspec.Raw(lists[i]))
        out = ext.filter(args)
        assert out.error == "" and len(out.failed_and_unresolvable_nodes) == 20_000

    kept = retained_after(filter_one, 16)
    assert kept < 12 * MiB, f"{kept / MiB:.0f} MiB retained"
    assert ext.requests.nodesets.bytes <= 8 * MiB


async def test_many_distinct_pods_with_huge_names_keep_memory_bounded() -> None:
    """The pods the policy was told of are remembered by a fixed-size digest, not by their names."""
    ext = await synced_extender()
    names = msgspec.json.encode(["node-0", "node-1"])
    long = "n" * MiB

    def filter_one(i: int) -> None:
        p = pod(f"{long}-{i}", core=50, resource_version="1")
        args = ExtenderArgs(pod=msgspec.Raw(msgspec.json.encode(p)), node_names=msgspec.Raw(names))
        ext.filter(args)

    kept = retained_after(filter_one, 60)
    assert kept < 40 * MiB, f"{kept / MiB:.0f} MiB retained"
