"""Two extender replicas elect a leader on a real Lease; whatever reaches them, a card is never
double-booked, and when the leader dies the other one takes over."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from e2e.cluster import SYSTEM_NS, Process, free_port, wait_until
from e2e.conftest import Cluster, allocation


def _bind(port: int, ns: str, name: str, uid: str, node: str) -> str:
    body = json.dumps({"PodName": name, "PodNamespace": ns, "PodUID": uid, "Node": node}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/bind", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return str(json.load(r)["Error"])


def _holder(cluster: Cluster) -> str:
    lease = cluster.cp.get("lease", "devshare-extender", "-n", SYSTEM_NS)
    return str(lease["spec"].get("holderIdentity") or "")


def test_two_replicas_never_double_book_and_fail_over(cluster: Cluster) -> None:
    cp = cluster.cp
    node = cluster.node("ha-1", gpus=1)
    leader_port = cp.extender_port
    other_port = free_port()
    cp.start_extender(name="extender-b", port=other_port)
    try:
        # pods no kube-scheduler handles (an unknown schedulerName): this test plays kube-scheduler
        pods = []
        for i in range(6):
            p = cluster.pod(f"ha-{i}", {"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "60"},
                            scheduler="e2e-manual")
            pods.append(cluster.get_pod(p["metadata"]["name"]))
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda a: _bind(*a), [
                (port, cluster.ns, p["metadata"]["name"], p["metadata"]["uid"], node)
                for p in pods for port in (leader_port, other_port)]))
        assert answers.count("") == 1, answers  # one 60% share fits the card; nobody else is bound
        assert any("not the leader" in a for a in answers), answers
        bound = [p for p in cluster.pods() if p["metadata"]["name"].startswith("ha-") and p["spec"].get("nodeName")]
        assert len(bound) == 1 and allocation(bound[0])["containers"][0]["devices"][0]["core"] == 60

        # the leader dies: the other replica takes the Lease and binds; still one pod on the card
        assert _holder(cluster) == _identity(cp.processes["extender"])
        cp.processes["extender"].signal(signal.SIGKILL)
        b = _identity(cp.processes["extender-b"])
        wait_until(lambda: _holder(cluster) == b, timeout=60, interval=0.5, what="replica b holding the Lease")
        cp.kubectl("delete", "pod", bound[0]["metadata"]["name"], "-n", cluster.ns, "--grace-period=0", "--force")
        wait_until(lambda: not any(d["pods"] for d in _devices(other_port, node)), what="b sees the card free")
        rest = [p for p in pods if p["metadata"]["name"] != bound[0]["metadata"]["name"]]
        answers = [_bind(other_port, cluster.ns, p["metadata"]["name"], p["metadata"]["uid"], node) for p in rest]
        assert answers.count("") == 1, answers
        bound = [p for p in cluster.pods() if p["metadata"]["name"].startswith("ha-") and p["spec"].get("nodeName")]
        assert len(bound) == 1
    finally:
        cp.processes["extender-b"].stop()
        a = cp.start_extender()  # the session's extender, on its port, leads again once the Lease lapses
        wait_until(lambda: _holder(cluster) == _identity(a), timeout=90, interval=0.5, what="the extender leading")


def _identity(proc: Process) -> str:
    assert proc.popen is not None
    return f"{socket.gethostname()}-{proc.popen.pid}"


def _devices(port: int, node: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/inspect", timeout=10) as r:
        data = json.load(r)
    return [d for n in data["nodes"] if n["name"] == node for d in n["devices"]]
