"""Warning Events of the DRA controller (server/dra/events.py): a v1 Event about the pod or claim, each
message once per object, sent beside the caller; a failed send is logged, never raised."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable
from typing import Any

import pytest

from devshare.kube.errors import Unavailable
from devshare.model import dra
from devshare.server.dra.events import FAILED_REASON, OVERBOOKED_REASON, REPORTED_KEPT, DraEvents


class Api:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.recorded: list[tuple[str, dict[str, Any]]] = []

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        if self.fail:
            raise Unavailable("connection refused")
        self.recorded.append((namespace, event))


class Events:
    """DraEvents whose side tasks are held until :meth:`sent` runs them."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.spawned: list[Awaitable[Any]] = []
        self.events = DraEvents(api, self.spawned.append)  # type: ignore[arg-type]

    async def sent(self) -> list[dict[str, Any]]:
        spawned, self.spawned[:] = list(self.spawned), []
        await asyncio.gather(*spawned)
        return [e for _, e in self.api.recorded]


async def test_a_refused_pod_gets_a_warning_event() -> None:
    ev = Events(Api())
    ev.events.report("Pod", "team", "p", "uid-p", FAILED_REASON, "no node has 2 GPUs free")
    assert len(ev.spawned) == 1  # sent beside the caller, not awaited by it
    [event] = await ev.sent()
    assert ev.api.recorded[0][0] == "team"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team", "name": "p",
                                       "uid": "uid-p"}
    assert event["reason"] == FAILED_REASON and event["type"] == "Warning"
    assert event["message"] == "no node has 2 GPUs free" and event["count"] == 1
    assert event["source"] == {"component": "devshare-dra"} and event["reportingComponent"] == "devshare-dra"
    assert event["metadata"]["namespace"] == "team" and re.fullmatch(r"p\.[0-9a-f]{16}", event["metadata"]["name"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", event["firstTimestamp"])
    assert event["lastTimestamp"] == event["firstTimestamp"]


async def test_a_claim_event_names_the_claims_api_version() -> None:
    ev = Events(Api())
    ev.events.report("ResourceClaim", "default", "c1", "uid-c1", OVERBOOKED_REASON, "would over-book gpu-0")
    [event] = await ev.sent()
    involved = event["involvedObject"]
    assert involved["apiVersion"] == dra.API_VERSION and involved["kind"] == "ResourceClaim"


async def test_each_message_once_per_object() -> None:
    ev = Events(Api())
    for _ in range(3):
        ev.events.report("Pod", "default", "p", "u", FAILED_REASON, "no room")
    ev.events.report("ResourceClaim", "default", "p", "u", OVERBOOKED_REASON, "no room")  # another object
    ev.events.report("Pod", "default", "p", "u", FAILED_REASON, "still no room, for another reason")
    ev.events.report("Pod", "default", "p", "u", FAILED_REASON, "no room")  # changed back: said again
    assert [e["message"] for e in await ev.sent()] == ["no room", "no room", "still no room, for another reason",
                                                      "no room"]


async def test_a_forgotten_object_is_reported_again() -> None:
    ev = Events(Api())
    ev.events.report("Pod", "default", "p", "u", FAILED_REASON, "no room")
    ev.events.forget("Pod/default/p")
    ev.events.forget("Pod/default/never-reported")  # nothing to forget: no error
    ev.events.report("Pod", "default", "p", "u", FAILED_REASON, "no room")
    assert len(await ev.sent()) == 2


async def test_the_oldest_object_is_forgotten_beyond_the_kept_number() -> None:
    ev = Events(Api())
    for i in range(REPORTED_KEPT + 1):
        ev.events.report("Pod", "default", f"p{i}", "u", FAILED_REASON, "no room")
    ev.events.report("Pod", "default", f"p{REPORTED_KEPT}", "u", FAILED_REASON, "no room")  # still kept: not again
    ev.events.report("Pod", "default", "p0", "u", FAILED_REASON, "no room")  # forgotten: said again
    events = await ev.sent()
    assert len(events) == REPORTED_KEPT + 2 and events[-1]["involvedObject"]["name"] == "p0"


async def test_a_long_message_is_cut_to_what_an_event_holds() -> None:
    ev = Events(Api())
    ev.events.report("Pod", "default", "p", "u", FAILED_REASON, "x" * 5000)
    [event] = await ev.sent()
    assert event["message"] == "x" * 1024


async def test_a_failed_send_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    ev = Events(Api(fail=True))
    ev.events.report("Pod", "default", "p", "u", FAILED_REASON, "no room")
    with caplog.at_level(logging.INFO):
        assert await ev.sent() == []
    assert f"could not record event {FAILED_REASON}: connection refused" in caplog.messages
