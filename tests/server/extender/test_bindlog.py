"""server/extender/bindlog.py: successful binds are logged (issue 40), a DEBUG line each with pod,
node and devices, formatted only when DEBUG is on, and an INFO summary every interval."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.server.extender.bindlog import BindLog, devices_of
from support.extender import cluster, pod, post, running

GiB = 2**30
ALLOC = PodAllocation(node="gpu-3", containers=(
    ContainerAllocation(name="main", devices=(DeviceGrant(type="gpu", minor=0, core_milli=300, memory=6 * GiB),)),
    ContainerAllocation(name="nic", devices=(DeviceGrant(type="rdma", minor=1, core_milli=500),)),
))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_what_each_container_got() -> None:
    assert devices_of(ALLOC) == "main: gpu 0 (30% compute, 6 GiB); nic: rdma 1 (50%)"


def test_a_debug_line_per_bind_and_nothing_formatted_at_info(caplog: pytest.LogCaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    book = BindLog(Clock())
    with caplog.at_level(logging.DEBUG, logger="devshare.server.extender.binding"):
        book.pod_bound("team-a/train", "gpu-3", ALLOC)
    assert caplog.messages == ["bound pod team-a/train to node gpu-3: main: gpu 0 (30% compute, 6 GiB); "
                               "nic: rdma 1 (50%)"]
    caplog.clear()
    called: list[Any] = []
    monkeypatch.setattr("devshare.server.extender.bindlog.devices_of", lambda a: called.append(a) or "")
    with caplog.at_level(logging.INFO, logger="devshare.server.extender.binding"):
        book.pod_bound("team-a/train", "gpu-3", ALLOC)
    assert caplog.messages == [] and called == []  # at INFO the devices are never written out


def test_a_summary_every_interval_and_none_when_idle(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    book = BindLog(clock)
    with caplog.at_level(logging.INFO, logger="devshare.server.extender.binding"):
        for seconds in (0.004, 0.002, 0.010):
            book.done(True, seconds)
        book.done(False, 0.001)
        clock.now += 59
        book.tick(60)
        assert caplog.messages == []  # not yet
        clock.now += 1
        book.tick(60)
        assert caplog.messages == ["binds in the last 60 s: 3 bound, 1 refused; bind latency p50 2.0 ms, max 10.0 ms"]
        clock.now += 120
        book.tick(60)  # no bind since: no line
        book.done(True, 0.003)
        clock.now += 60
        book.tick(0)  # 0: summaries off
        assert len(caplog.messages) == 1
        book.tick(60)
        assert caplog.messages[-1] == "binds in the last 60 s: 1 bound, 0 refused; bind latency p50 3.0 ms, max 3.0 ms"


async def test_the_extender_logs_each_bind_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    backend = cluster(nodes=1, gpus=2, pods=[pod("p", core=30)])
    async with running(backend) as (client, runtime):
        with caplog.at_level(logging.DEBUG, logger="devshare.server.extender.binding"):
            out = await post(client, "/bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p",
                                               "Node": "node-0"})
            await post(client, "/bind", {"PodName": "ghost", "PodNamespace": "default", "PodUID": "x",
                                         "Node": "node-0"})
        assert out["Error"] == ""
        assert any(m.startswith("bound pod default/p to node node-0: ") and "% compute" in m for m in caplog.messages)
        book = runtime.extender.binder.log
        assert (book.bound, book.refused, len(book.latencies)) == (1, 1, 2)
