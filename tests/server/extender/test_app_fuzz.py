"""Hypothesis against the live extender over HTTP: any body, for any verb, gets an answer kube-scheduler
can read (200) or a 400 with a message; never a 500. Random filter/prioritize/bind arguments over a
small cluster never break the state either (no device oversubscribed)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.server.extender.serve import RUNTIME, Runtime, build_app
from support.extender import cluster, pod
from support.server import ServerThread
from support.waiting import eventually_in_thread

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
VERBS = ["/filter", "/prioritize", "/bind", "/preempt"]
NAMES = ["node-0", "node-1", "node-2", "nope", ""]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
asks = st.sampled_from([
    {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "4Gi"},
    {"nvidia.com/gpu": "2"},
    {"koordinator.sh/gpu-core": "-5"},
    {"aliyun.com/gpu-mem": "3"},
    {"koordinator.sh/gpu-core": "abc"},
])
pods = st.builds(
    lambda n, limits: {"metadata": {"name": f"p{n}", "namespace": "default", "uid": f"uid-{n}"},
                       "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}},
    st.integers(0, 5), asks) | json_values
args = st.fixed_dictionaries(
    {},
    optional={
        "Pod": pods, "NodeNames": st.lists(st.sampled_from(NAMES), max_size=4) | json_values,
        "Nodes": st.none() | st.builds(lambda ns: {"items": [{"metadata": {"name": n}} for n in ns]},
                                       st.lists(st.sampled_from(NAMES), max_size=3)) | json_values,
        "PodName": st.sampled_from(["p0", "p1", "gone"]) | json_values,
        "PodNamespace": st.just("default") | json_values,
        "PodUID": st.text(max_size=4) | json_values, "Node": st.sampled_from(NAMES) | json_values,
        "NodeNameToMetaVictims": json_values, "NodeNameToVictims": json_values,
    },
)
bodies = st.one_of(st.binary(max_size=48), json_values.map(lambda v: json.dumps(v).encode()),
                   args.map(lambda v: json.dumps(v).encode()))


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServerThread, Runtime]]:
    srv = ServerThread(build_app(cluster(3, gpus=2, pods=[pod(f"p{i}", core=50, mem="4Gi") for i in range(6)])))
    runtime = srv.app[RUNTIME]
    eventually_in_thread(lambda: runtime.informer.is_synced)
    yield srv, runtime
    srv.close()


def post(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@SETTINGS
@given(raw=bodies, verb=st.sampled_from(VERBS))
def test_any_body_gets_an_answer_or_a_400(served: tuple[ServerThread, Runtime], raw: bytes, verb: str) -> None:
    srv, runtime = served
    status, answer = post(srv.port, verb, raw)
    assert status in (200, 400), (status, answer)
    doc: Any = json.loads(answer)
    if status == 400:
        assert isinstance(doc["error"], str) and doc["error"].startswith(verb[1:] + ": ")
    state = runtime.state
    for t in state.tables.values():
        rows = state.node_rows()
        assert (t.used_core[rows] <= t.total_core[rows]).all()
        assert (t.used_mem[rows] <= t.total_mem[rows]).all()
