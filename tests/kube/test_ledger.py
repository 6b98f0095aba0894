"""The claim ledger's API object: one ConfigMap, written only by compare-and-swap."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.kube.errors import Conflict
from devshare.kube.ledger import (
    LABEL,
    NAME,
    Claim,
    ClaimLedger,
    Ledger,
    decode,
    decode_claims,
    encode_claims,
    encoded_size,
)
from devshare.kube.memory import MemoryBackend
from devshare.kube.rest import KubeClient
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
        a = msgspec.structs.replace(a, node=f"node-{i % 2}")
        claims[f"ns/p{i}"] = Claim(pod=f"ns/p{i}", uid=f"u{i}", by="r/1", at=micros / 1e6, allocation=a, priority=i)
    text = encode_claims(claims)
    assert decode_claims(text) == claims
    assert encoded_size(claims) == len(text)


def test_a_ledger_that_is_not_one_is_an_error_not_a_guess() -> None:
    broken = decode({"metadata": {"name": NAME, "resourceVersion": "7"}, "data": {"claims": "[{"}})
    assert broken.error is not None and "not a list of claims" in broken.error and broken.resource_version == "7"
    odd = decode({"metadata": {"name": NAME, "resourceVersion": "8"}, "data": {"watermark": "soon", "claims": "[]"}})
    assert odd.error is not None and "data.watermark must be a resourceVersion, got 'soon'" in odd.error
    assert decode({"metadata": {"name": NAME, "resourceVersion": "9"}}) == Ledger("9")


async def test_writes_are_compare_and_swap() -> None:
    backend = MemoryBackend()
    ledger = ClaimLedger(backend)
    empty = await ledger.read()
    assert empty == Ledger()
    first = await ledger.write(empty, {"ns/a": claim("ns/a")}, "")
    assert first.resource_version is not None
    with pytest.raises(Conflict):  # created meanwhile by another replica
        await ledger.write(empty, {"ns/b": claim("ns/b")}, "")
    second = await ledger.write(first, {**first.claims, "ns/b": claim("ns/b", node="node-1")}, "41")
    with pytest.raises(Conflict):  # written meanwhile: the version read is stale
        await ledger.write(first, {"ns/c": claim("ns/c")}, "")
    assert await ledger.read() == second
    assert set(second.claims) == {"ns/a", "ns/b"} and second.watermark == "41"
    assert second.claims["ns/b"].node == "node-1"


async def test_the_real_protocol_through_the_fake_api_server(fake_api: FakeApiServer,  # noqa: F811
                                                             live_backend: KubeClient) -> None:  # noqa: F811
    ledger = ClaimLedger(live_backend)
    assert ledger.where == f"ConfigMap devshare-system/{NAME}"
    written = await ledger.write(Ledger(), {"ns/a": claim("ns/a")}, "")
    stored = fake_api.get("configmaps", f"devshare-system/{NAME}")
    assert stored is not None and stored["metadata"]["labels"][LABEL] == "v2"
    assert '"pod":"ns/a"' in stored["data"]["claims"] and '"node":"node-0"' in stored["data"]["claims"]
    with pytest.raises(Conflict):
        await ledger.write(Ledger(), {}, "")  # it exists: create answers 409
    emptied = await ledger.write(written, {}, "12")
    with pytest.raises(Conflict):
        await ledger.write(written, {"ns/b": claim("ns/b")}, "")  # PUT at a stale resourceVersion: 409
    assert await ledger.read() == emptied and emptied.watermark == "12" and not emptied.claims
    fake_api.delete("configmaps", f"devshare-system/{NAME}")
    with pytest.raises(Conflict, match="deleted since it was read"):
        await ledger.write(emptied, {}, "12")
