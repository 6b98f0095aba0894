"""Hostile bodies (issue 12): JSON nested far too deep, absurd quantities. Each is refused as a bad
request with a reason, never a 500, never a MemoryError/OverflowError from deep inside the engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.extender import cluster, pod, running

DEEP = 1000


def deep_array(depth: int = DEEP) -> bytes:
    return b"[" * depth + b"]" * depth


def deep_object(depth: int = DEEP) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


DEEP_BODIES = {
    "/filter": [
        deep_array(),
        b'{"Pod": ' + deep_object() + b', "NodeNames": ["node-0"]}',
        b'{"Pod": {}, "NodeNames": ' + deep_array() + b"}",
        b'{"Pod": {}, "Nodes": ' + deep_object() + b"}",
        b'{"Pod": {"metadata": {"name": "p", "labels": ' + deep_object() + b'}}, "NodeNames": ["node-0"]}',
    ],
    "/prioritize": [
        deep_array(),
        b'{"Pod": ' + deep_object() + b', "NodeNames": ["node-0"]}',
        b'{"Pod": {}, "NodeNames": ' + deep_array() + b"}",
    ],
    "/bind": [
        deep_array(),
        b'{"PodName": "p", "PodNamespace": "default", "Node": "node-0", "x": ' + deep_object() + b"}",
        b'{"podname": "p", "PodNamespace": "default", "Node": "node-0", "x": ' + deep_array() + b"}",
    ],
    "/preempt": [
        deep_array(),
        b'{"Pod": ' + deep_object() + b"}",
        b'{"Pod": {}, "NodeNameToVictims": {"n": {"Pods": [' + deep_object() + b"]}}}",
    ],
}
CASES = [(verb, body) for verb, bodies in DEEP_BODIES.items() for body in bodies]


@pytest.mark.parametrize(("verb", "body"), CASES, ids=[f"{v[1:]}-{i}" for i, (v, _) in enumerate(CASES)])
async def test_json_nested_1000_deep_is_a_400_with_a_reason(verb: str, body: bytes) -> None:
    async with running(cluster(1, gpus=1)) as (client, _):
        r = await client.post(verb, data=body, headers={"Content-Type": "application/json"})
        out = await r.json()
        assert r.status == 400, out
        assert "nested too deeply" in out["error"], out
        # and the extender still answers
        assert (await client.get("/healthz")).status == 200


def absurd(resources: dict[str, str]) -> dict[str, Any]:
    p = pod("absurd")
    p["spec"]["containers"][0]["resources"] = {"limits": dict(resources)}
    return p


ABSURD = [
    ({"nvidia.com/gpu": "100000000000"}, "nvidia.com/gpu"),
    ({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "9999999Ei"}, "koordinator.sh/gpu-memory"),
    ({"koordinator.sh/gpu": "1e20"}, "koordinator.sh/gpu"),
    ({"aliyun.com/gpu-mem": "1e18"}, "aliyun.com/gpu-mem"),
    ({"vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "99999999999999999"},
     "vke.volcengine.com/mgpu-memory"),
]


@pytest.mark.parametrize(("resources", "name"), ABSURD, ids=[a[1] for a in ABSURD])
async def test_absurd_quantities_are_an_invalid_request(resources: dict[str, str], name: str) -> None:
    async with running(cluster(2, gpus=2)) as (client, _):
        body = {"Pod": absurd(resources), "Nodes": None, "NodeNames": ["node-0", "node-1"]}
        r = await client.post("/filter", data=json.dumps(body), headers={"Content-Type": "application/json"})
        out = await r.json()
    assert r.status == 200, out
    assert out["NodeNames"] == [] and out["FailedNodes"] == {}, out
    reasons = set(out["FailedAndUnresolvableNodes"].values())
    assert len(reasons) == 1, reasons
    reason = reasons.pop()
    assert reason.startswith("invalid request: ") and name in reason and "at most" in reason, reason
    assert "internal" not in reason and "Error" not in reason, reason


async def test_absurd_cpu_is_refused_and_does_not_poison_later_pods() -> None:
    """The policy learns from every filtered pod: an absurd one must be refused before it does."""
    async with running(cluster(2, gpus=2)) as (client, _):
        bad = pod("bad", core=50)
        bad["spec"]["containers"][0]["resources"]["limits"].update({"cpu": "1e30", "memory": "9999999Ei"})
        for p, passed in ((bad, []), (pod("good", core=50), ["node-0", "node-1"])):
            body = {"Pod": p, "Nodes": None, "NodeNames": ["node-0", "node-1"]}
            r = await client.post("/filter", data=json.dumps(body), headers={"Content-Type": "application/json"})
            out = await r.json()
            assert r.status == 200, out
            assert sorted(out["NodeNames"]) == passed, out
            if not passed:
                assert "far beyond any node" in out["FailedAndUnresolvableNodes"]["node-0"], out


async def test_absurd_mgpu_card_count_says_the_maximum() -> None:
    p = pod("m")
    p["spec"]["containers"][0]["resources"] = {"limits": {"vke.volcengine.com/mgpu-core": "30",
                                                          "vke.volcengine.com/mgpu-memory": "1024"}}
    p["metadata"]["annotations"] = {"vke.volcengine.com/container-multiple-gpu": "100000000000"}
    async with running(cluster(1, gpus=2)) as (client, _):
        body = {"Pod": p, "Nodes": None, "NodeNames": ["node-0"]}
        out = await (await client.post("/filter", data=json.dumps(body))).json()
    assert "at most 1024 cards" in out["FailedAndUnresolvableNodes"]["node-0"], out
