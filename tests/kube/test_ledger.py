"""The claim ledger's API objects: one ConfigMap per node, written only by compare-and-swap."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.kube.errors import Conflict
from devshare.kube.ledger import (
    LABEL,
    Claim,
    ClaimLedger,
    NodeLedger,
    decode,
    decode_claims,
    encode_claims,
    object_name,
)
from devshare.kube.live import LiveBackend
from devshare.kube.memory import MemoryBackend
from devshare.model.allocation import ContainerAllocation, PodAllocation
from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
from fakeapi.server import FakeApiServer
from support.allocations import allocations, gpu


def claim(key: str, node: str = "node-0", minor: int = 0, core: int = 600, by: str = "a", at: float = 1.7e9) -> Claim:
    alloc = PodAllocation(node=node, containers=(ContainerAllocation(name="main", devices=(
        gpu(minor, core, core * 2**24, core),)),))
    return Claim(pod=key, uid=f"uid-{key}", by=by, at=at, allocation=alloc, priority=3)


@settings(max_examples=50, deadline=None)
@given(st.lists(allocations(), max_size=5), st.integers(0, 2**40))
def test_claims_round_trip(allocs: list[PodAllocation], micros: int) -> None:
    claims = {}
    for i, a in enumerate(allocs):
        a = msgspec.structs.replace(a, node="node-x")
        claims[f"ns/p{i}"] = Claim(pod=f"ns/p{i}", uid=f"u{i}", by="r/1", at=micros / 1e6, allocation=a, priority=i)
    assert decode_claims(encode_claims(claims), "node-x") == claims


def test_a_claim_names_its_node_and_a_ledger_of_another_is_refused() -> None:
    text = encode_claims({"ns/p": claim("ns/p", node="node-1")})
    with pytest.raises(ValueError, match="names node node-1, not node-0"):
        decode_claims(text, "node-0")
    broken = decode({"metadata": {"name": object_name("node-0"), "resourceVersion": "7"},
                     "data": {"node": "node-0", "claims": "[{"}}, "node-0")
    assert broken.error is not None and "not a list of claims" in broken.error and broken.resource_version == "7"


def test_object_names_are_valid_for_any_node_name() -> None:
    assert object_name("gpu-node-1") == "devshare-claims-gpu-node-1"
    long = "n" * 253
    name = object_name(long)
    assert len(name) <= 253 and name.startswith("devshare-claims-") and name != object_name("m" * 253)


async def test_writes_are_compare_and_swap() -> None:
    backend = MemoryBackend()
    ledger = ClaimLedger(backend)
    empty = await ledger.read("node-0")
    assert empty == NodeLedger("node-0")
    first = await ledger.write(empty, {"ns/a": claim("ns/a")})
    assert first.resource_version is not None
    with pytest.raises(Conflict):  # created meanwhile by another replica
        await ledger.write(empty, {"ns/b": claim("ns/b")})
    second = await ledger.write(first, {**first.claims, "ns/b": claim("ns/b", minor=1)})
    with pytest.raises(Conflict):  # written meanwhile: the version read is stale
        await ledger.write(first, {"ns/c": claim("ns/c")})
    assert await ledger.read("node-0") == second
    assert set(second.claims) == {"ns/a", "ns/b"}
    assert await ledger.list() == {"node-0": second}


async def test_the_real_protocol_through_the_fake_api_server(fake_api: FakeApiServer,  # noqa: F811
                                                             live_backend: LiveBackend) -> None:  # noqa: F811
    ledger = ClaimLedger(live_backend)
    written = await ledger.write(NodeLedger("node-0"), {"ns/a": claim("ns/a")})
    stored = fake_api.get("configmaps", f"devshare-system/{object_name('node-0')}")
    assert stored is not None and stored["metadata"]["labels"][LABEL] == "v1"
    assert stored["data"]["node"] == "node-0" and '"pod":"ns/a"' in stored["data"]["claims"]
    fake_api.put({"apiVersion": "v1", "kind": "ConfigMap",  # another ConfigMap: not a ledger, not listed
                  "metadata": {"name": "other", "namespace": "devshare-system"}, "data": {}})
    with pytest.raises(Conflict):
        await ledger.write(NodeLedger("node-0"), {})  # it exists: create answers 409
    await ledger.write(written, {})
    with pytest.raises(Conflict):
        await ledger.write(written, {"ns/b": claim("ns/b")})  # PUT at a stale resourceVersion: 409
    listed = await ledger.list()
    assert list(listed) == ["node-0"] and listed["node-0"].claims == {}
