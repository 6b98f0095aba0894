"""The slices the DRA controller publishes (server/dra/publisher.py): written once per change of a
node's devices, and not even built again while the devices and the slice are as written."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devshare.model import draslices
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.server.dra import publisher
from devshare.server.dra.publisher import publish

GiB = 2**30


class Api:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.rv = 0

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        out = copy.deepcopy(obj)
        out["metadata"]["resourceVersion"] = str(self.rv)
        return out

    async def create(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"create {obj['metadata']['name']}")
        return self._stamp(obj)

    async def update(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"update {obj['metadata']['name']}")
        return self._stamp(obj)

    async def delete(self, kind: str, namespace: str | None, name: str) -> None:
        self.calls.append(f"delete {name}")


def devices(node: str, gpus: int) -> NodeDevices:
    return NodeDevices(node=node, devices=tuple(
        DeviceInfo(type="gpu", minor=i, id=f"GPU-{node}-{i}", memory=16 * GiB) for i in range(gpus)))


async def test_unchanged_devices_are_neither_written_nor_built_again(monkeypatch: pytest.MonkeyPatch) -> None:
    built = 0
    real = draslices.slice_object

    def counting(nd: NodeDevices, **kw: Any) -> dict[str, Any]:
        nonlocal built
        built += 1
        return real(nd, **kw)

    monkeypatch.setattr(publisher.draslices, "slice_object", counting)
    api, slices, memo = Api(), {}, {}  # type: ignore[var-annotated]
    state = {"a": devices("a", 2), "b": devices("b", 1)}
    await publish(api, slices, state, memo)  # type: ignore[arg-type]
    assert sorted(api.calls) == [f"create {draslices.slice_name('a')}", f"create {draslices.slice_name('b')}"]
    assert built == 2
    await publish(api, slices, state, memo)  # type: ignore[arg-type]
    assert len(api.calls) == 2 and built == 2  # nothing built, nothing written
    state["a"] = devices("a", 3)  # a's Device changed
    await publish(api, slices, state, memo)  # type: ignore[arg-type]
    assert api.calls[-1] == f"update {draslices.slice_name('a')}" and built == 3
    name = draslices.slice_name("b")  # someone else changed b's slice: compared (and put back) again
    slices[name] = {**slices[name], "metadata": {**slices[name]["metadata"], "resourceVersion": "99"}}
    await publish(api, slices, state, memo)  # type: ignore[arg-type]
    assert built == 4
    del state["b"]  # b's Device gone: its slice goes
    await publish(api, slices, state, memo)  # type: ignore[arg-type]
    assert api.calls[-1] == f"delete {name}" and name not in memo


async def test_devices_that_come_and_go_while_slices_are_written_are_published_next_round() -> None:
    """A write awaits the API server; Devices arrive meanwhile (1,000 nodes created at once). The round
    must not fail on the changed mapping (it ended the extender's background tasks: every watch and the
    election), and the next round publishes what arrived."""
    state = {"a": devices("a", 1)}

    class Arriving(Api):
        async def create(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
            state.setdefault("b", devices("b", 1))
            return await super().create(kind, obj)

    api, slices, memo = Arriving(), {}, {}  # type: ignore[var-annotated]
    await publish(api, slices, state, memo)  # type: ignore[arg-type]
    await publish(api, slices, state, memo)  # type: ignore[arg-type]
    assert sorted(api.calls) == [f"create {draslices.slice_name('a')}", f"create {draslices.slice_name('b')}"]
