"""kube-scheduler's side of the extender protocol, played by a test: the verbs posted as kube-scheduler
posts them, a workload driven through filter, prioritize and bind."""

from __future__ import annotations

import asyncio
import http.client
import json
from typing import Any

from devshare.kube.memory import MemoryBackend
from devshare.model import names
from devshare.server.extender.serve import RUNTIME
from support.server import ServerThread
from support.waiting import eventually_in_thread


def post(port: int, path: str, body: dict[str, Any], *, timeout: float = 10) -> Any:
    """POST ``body`` as JSON to the extender on ``port``, as kube-scheduler does; its answer (200 asserted)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        return json.loads(resp.read())
    finally:
        conn.close()



def play_kube_scheduler(srv: ServerThread, backend: MemoryBackend, pods: list[dict[str, Any]],
                        predicted: list[dict[str, Any]], node_names: list[str]) -> None:
    """Drive the extender of ``srv`` over ``pods`` as kube-scheduler does (filter, prioritize, bind to a
    best-scored node), checking each answer against the dry run's ``predicted`` placement."""
    runtime = srv.app[RUNTIME]
    eventually_in_thread(lambda: runtime.informer.is_synced)
    for obj, want in zip(pods, predicted, strict=True):
        args = {"Pod": obj, "Nodes": None, "NodeNames": node_names}
        passed = post(srv.port, "/filter", args)["NodeNames"] or []
        if want["node"] is None:
            assert passed == [], (want, passed)
            continue
        assert want["node"] in passed, (want, passed)
        prio = {h["Host"]: h["Score"] for h in post(srv.port, "/prioritize", {**args, "NodeNames": passed})}
        # kube-scheduler binds to one of the best-scored nodes: the dry run's is one of them
        assert prio[want["node"]] == max(prio.values()), (want["pod"], want["node"], prio)
        name = obj["metadata"]["name"]
        bound = post(srv.port, "/bind", {"PodName": name, "PodNamespace": "default",
                                        "PodUID": obj["metadata"]["uid"], "Node": want["node"]})
        assert not bound.get("Error"), bound
        stored = asyncio.run_coroutine_threadsafe(backend.get_pod("default", name), srv.loop).result(10)
        assert stored is not None
        got = stored["metadata"]["annotations"]
        assert json.loads(got[names.ALLOCATION]) == json.loads(want["annotations"][names.ALLOCATION]), name
