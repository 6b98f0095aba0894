"""The node agent's reporter, running with the identity of deploy/agent's ServiceAccount, creates its
node's Device and advertises the node's extended resources on the Node's status; and each agent may
change only what belongs to its own node (deploy/agent/node-restriction.yaml)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.cluster import DEVSHARE, wait_until
from e2e.conftest import Cluster, allocation


def test_reporter_creates_device_and_node_status_with_its_own_identity(cluster: Cluster, tmp_path: Path) -> None:
    node = cluster.node("agent-1", gpus=0)
    cluster.cp.kubectl("delete", "device", node)  # the agent makes it
    fake = tmp_path / "node.yaml"
    fake.write_text(yaml.safe_dump({"model": "Tesla V100-SXM2-16GB", "memory": "16Gi", "gpus": 4,
                                    "driverVersion": "535.104.05"}))
    cfg = cluster.cp.token_kubeconfig("devshare-agent", on_node=node)  # as the DaemonSet's pod on the node
    proc = cluster.cp.spawn("agent", [*DEVSHARE, "agent", "report", "--fake", str(fake), "--node", node,
                                      "--interval", "1"],
                            env={**os.environ, "KUBECONFIG": str(cfg), "PYTHONUNBUFFERED": "1"})
    try:
        dev = wait_until(lambda: cluster.cp.kubectl("get", "device", node, "-o", "yaml", check=False).stdout,
                         timeout=60, what="the agent's Device")
        device = yaml.safe_load(dev)
        gpus = [d for d in device["spec"]["devices"] if d["type"] == "gpu"]
        assert [d["minor"] for d in gpus] == [0, 1, 2, 3]
        assert all(d["resources"]["koordinator.sh/gpu-memory"] == "16Gi" for d in gpus)

        def advertised() -> dict[str, str] | None:
            alloc = cluster.cp.get("node", node)["status"]["allocatable"]
            return alloc if "vke.volcengine.com/mgpu-memory" in alloc else None
        alloc = wait_until(advertised, timeout=60, what="the node's extended resources")
        assert alloc["vke.volcengine.com/mgpu-memory"] == str(4 * 16 * 1024)  # MiB of the four cards

        # seed 001: the GPU model, driver and vendor on the Node (and the Device), as labels
        def labelled() -> dict[str, str] | None:
            labels = cluster.cp.get("node", node)["metadata"]["labels"]
            return labels if "devshare.io/gpu-model" in labels else None
        labels = wait_until(labelled, timeout=60, what="the node's GPU labels")
        for prefix in ("devshare.io", "node.koordinator.sh"):
            assert labels[f"{prefix}/gpu-model"] == "Tesla-V100-SXM2-16GB"
            assert labels[f"{prefix}/gpu-driver-version"] == "535.104.05"
            assert labels[f"{prefix}/gpu-vendor"] == "nvidia"
        assert yaml.safe_load(cluster.cp.kubectl("get", "device", node, "-o", "yaml").stdout)["metadata"][
            "labels"]["devshare.io/gpu-model"] == "Tesla-V100-SXM2-16GB"
        # a nodeSelector on the model, nobody labelled the node by hand: kube-scheduler and devshare place it
        pod = cluster.pod("on-model", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
                          create=False)
        pod["spec"]["nodeSelector"]["devshare.io/gpu-model"] = "Tesla-V100-SXM2-16GB"
        cluster.cp.kubectl("create", "-f", "-", input=json.dumps(pod))
        assert cluster.wait_bound("on-model", timeout=60)["spec"]["nodeName"] == node
        assert proc.alive, proc.tail()
    finally:
        proc.stop()


def test_each_agent_changes_only_its_own_node(cluster: Cluster) -> None:
    """Issue 12: the agent's ClusterRole let any agent patch every pod, every node's status and every
    Device. The ValidatingAdmissionPolicy keyed on the node its token is bound to refuses the rest."""
    cp = cluster.cp
    mine, other = cluster.node("own-a", gpus=1), cluster.node("own-b", gpus=1)
    agent = cp.token_kubeconfig("devshare-agent", on_node=mine)

    def as_agent(*args: str) -> subprocess.CompletedProcess[str]:
        """``kubectl patch KIND NAME [-n NS] [--subresource=status] --type=merge -p BODY`` as the agent
        makes it: one PATCH (kubectl would GET first, which the agent's RBAC does not allow on
        nodes/status)."""
        kind, name, *rest = args[1:]
        ns = rest[rest.index("-n") + 1] if "-n" in rest else ""
        sub = "/status" if "--subresource=status" in rest else ""
        body = rest[rest.index("-p") + 1]
        base = {"node": "/api/v1/nodes", "device": "/apis/devshare.io/v1alpha1/devices",
                "pod": f"/api/v1/namespaces/{ns}/pods"}[kind]
        return _patch(agent, f"{base}/{name}{sub}", body)

    status = json.dumps({"status": {"capacity": {"example.com/probe": "1"}}})
    assert as_agent("patch", "node", mine, "--subresource=status", "--type=merge", "-p", status).returncode == 0
    out = as_agent("patch", "node", other, "--subresource=status", "--type=merge", "-p", status)
    assert out.returncode != 0
    assert "ValidatingAdmissionPolicy 'devshare-agent-own-node'" in out.stderr, out.stderr
    assert f"the devshare agent of node {mine} may only change objects of its own node, not nodes {other}" \
        in out.stderr, cp.get("validatingadmissionpolicy", "devshare-agent-own-node").get("status")

    label = json.dumps({"metadata": {"labels": {"probe": "1"}}})
    # its node's GPU labels, on its node only; no other label, not through the status either
    gpu = json.dumps({"metadata": {"labels": {"devshare.io/gpu-model": "A100-SXM4-80GB",
                                              "node.koordinator.sh/gpu-driver-version": None}}})
    assert as_agent("patch", "node", mine, "--type=merge", "-p", gpu).returncode == 0
    assert cp.get("node", mine)["metadata"]["labels"]["devshare.io/gpu-model"] == "A100-SXM4-80GB"
    out = as_agent("patch", "node", other, "--type=merge", "-p", gpu)
    assert out.returncode != 0 and f"not nodes {other} of node {other}" in out.stderr
    out = as_agent("patch", "node", mine, "--type=merge", "-p", label)
    assert out.returncode != 0 and "may only set devshare.io/gpu-model" in out.stderr, out.stderr
    h100 = json.dumps({"metadata": {"labels": {"devshare.io/gpu-model": "H100"}}})
    as_agent("patch", "node", mine, "--subresource=status", "--type=merge", "-p", h100)  # refused (or ignored)
    assert cp.get("node", mine)["metadata"]["labels"]["devshare.io/gpu-model"] == "A100-SXM4-80GB"
    taint = json.dumps({"spec": {"unschedulable": True}})
    assert as_agent("patch", "node", mine, "--type=merge", "-p", taint).returncode != 0
    devices = "/apis/devshare.io/v1alpha1/devices"
    assert _relabel(agent, f"{devices}/{mine}").returncode == 0  # the agent reads and updates Devices
    out = _relabel(agent, f"{devices}/{other}")
    assert out.returncode != 0 and f"not devices {other} of node {other}" in out.stderr

    # pods devshare bound to each node: the agent marks its own node's pods assigned, nothing else
    for name, node in (("on-mine", mine), ("on-other", other)):
        obj = cluster.pod(name, {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
                          create=False)
        obj["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
        cp.kubectl("create", "-f", "-", input=json.dumps(obj))
        cluster.wait_bound(name, timeout=60)
    assigned = json.dumps({"metadata": {"annotations": {"devshare.io/assigned": "true"}}})
    ns = ["-n", cluster.ns]
    assert as_agent("patch", "pod", "on-mine", *ns, "--type=merge", "-p", assigned).returncode == 0
    assert cluster.get_pod("on-mine")["metadata"]["annotations"]["devshare.io/assigned"] == "true"
    out = as_agent("patch", "pod", "on-other", *ns, "--type=merge", "-p", assigned)
    assert out.returncode != 0 and f"of node {other}" in out.stderr
    out = as_agent("patch", "pod", "on-mine", *ns, "--type=merge", "-p", label)
    assert out.returncode != 0 and "may only set devshare.io/assigned, ALIYUN_COM_GPU_MEM_ASSIGNED" in out.stderr
    forged = json.dumps({"metadata": {"annotations": {"devshare.io/allocation": "{}"}}})
    out = as_agent("patch", "pod", "on-mine", *ns, "--type=merge", "-p", forged)
    assert out.returncode != 0

    # a token bound to no node changes nothing, not even its "own" node
    unbound = cp.token_kubeconfig("devshare-agent")
    out = _relabel(unbound, f"{devices}/{mine}")
    assert out.returncode != 0 and "the devshare agent's token is bound to no node" in out.stderr


def _patch(kubeconfig: Path, path: str, body: str, method: str = "PATCH") -> subprocess.CompletedProcess[str]:
    """A merge PATCH (or another method) with the kubeconfig's token; the answer as kubectl would
    give it (rc, stdout, stderr)."""
    import ssl
    import urllib.error
    import urllib.request

    cfg = yaml.safe_load(kubeconfig.read_text())
    cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
    ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
    kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
    req = urllib.request.Request(cluster["server"] + path, data=body.encode() if body else None, method=method,
                                 headers={"Authorization": f"Bearer {user['token']}", "Content-Type": kind})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return subprocess.CompletedProcess([path], 0, r.read().decode(), "")
    except urllib.error.HTTPError as e:
        return subprocess.CompletedProcess([path], 1, "", e.read().decode(errors="replace"))


def _relabel(kubeconfig: Path, path: str) -> subprocess.CompletedProcess[str]:
    """GET the object and PUT it back with one more label, as the kubeconfig's user."""
    got = _patch(kubeconfig, path, "", method="GET")
    if got.returncode:
        return got
    obj = json.loads(got.stdout)
    obj["metadata"].setdefault("labels", {})["probe"] = "1"
    return _patch(kubeconfig, path, json.dumps(obj), method="PUT")


def test_the_extender_follows_a_trade(cluster: Cluster) -> None:
    """Issue 13: the node agent trades the allocations of two identical pods whose devices kubelet's
    Allocate handed out crosswise. Made with the agent's own identity through the real admission
    chain (its ValidatingAdmissionPolicy, the allocations webhook); the extender parks the first
    write until the second arrives, so neither card is ever counted twice or refused in between,
    and ends with each pod on the other's card."""
    from devshare.model import trade

    cp = cluster.cp
    node = cluster.node("trade-1", gpus=2)
    ask = {"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "60"}  # one per card
    for name in ("a", "b", "c"):
        cluster.pod(name, ask)
    pods = {n: cluster.wait_bound(n, timeout=60) for n in ("a", "b")}
    pending = cluster.get_pod("c")
    assert not pending["spec"].get("nodeName")  # both cards are taken: c waits
    card = {n: allocation(p)["containers"][0]["devices"][0]["minor"] for n, p in pods.items()}
    assert sorted(card.values()) == [0, 1]

    def holders() -> dict[int, list[str]]:
        (n,) = cluster.inspect()["nodes"]
        return {d["minor"]: sorted(p.split("/")[1] for p in d["pods"]) for d in n["devices"]}

    assert holders() == {card["a"]: ["a"], card["b"]: ["b"]}
    agent = cp.token_kubeconfig("devshare-agent", on_node=node)
    uid = {n: p["metadata"]["uid"] for n, p in pods.items()}
    ann = {n: p["metadata"]["annotations"] for n, p in pods.items()}
    base = f"/api/v1/namespaces/{cluster.ns}/pods"

    # what the webhook refuses: anyone else's trade (even a cluster admin's), the agent rewriting an
    # allocation without the tag
    forged = json.dumps({"metadata": {"annotations": trade.leg(ann["a"], ann["b"], uid["b"])}})
    out = cp.kubectl("patch", "pod", "a", "-n", cluster.ns, "--type=merge", "-p", forged, check=False)
    assert out.returncode != 0 and "may only be changed by devshare" in out.stderr, out.stderr
    untagged = {k: v for k, v in trade.leg(ann["a"], ann["b"], uid["b"]).items() if k != trade.TRADE}
    out = _patch(agent, f"{base}/a", json.dumps({"metadata": {"annotations": untagged}}))
    assert out.returncode != 0 and "trade" in out.stderr, out.stderr

    # the first write: a takes b's card. Alone it would put 120% on that card: the extender waits
    first = _patch(agent, f"{base}/a", forged)
    assert first.returncode == 0, first.stderr
    wait_until(lambda: cluster.get_pod("a")["metadata"]["annotations"].get(trade.TRADE) == uid["b"],
               what="a's trade write")
    wait_until(lambda: _parked(cp.extender_port) == 1 or None, timeout=30, what="the extender parking a's write")
    assert holders() == {card["a"]: ["a"], card["b"]: ["b"]}  # parked: nothing counted twice
    assert not cluster.events("a", "DeviceOverbooked")
    assert not cluster.get_pod("c")["spec"].get("nodeName")  # no card looked free in between

    # the second write: b takes a's former card; the extender applies the two together
    second = _patch(agent, f"{base}/b", json.dumps({"metadata": {"annotations": trade.leg(
        ann["b"], ann["a"], uid["a"])}}))
    assert second.returncode == 0, second.stderr
    wait_until(lambda: holders() == {card["b"]: ["a"], card["a"]: ["b"]}, timeout=30,
               what="the extender following the trade")
    assert not cluster.events("a", "DeviceOverbooked") and not cluster.events("b", "DeviceOverbooked")
    assert allocation(cluster.get_pod("a"))["containers"][0]["devices"][0]["minor"] == card["b"]
    assert not cluster.get_pod("c")["spec"].get("nodeName")

    # the agent's client writes a pod only while it is the pod it means (its uid as a precondition)
    from devshare.agent.kubeclient import FIELD_MANAGER, KubeAgentClient
    from devshare.kube.rest import KubeClient

    client = KubeAgentClient(KubeClient.connect(agent, field_manager=FIELD_MANAGER))
    mark = {"devshare.io/assigned": "true"}
    try:
        with pytest.raises(LookupError):
            client.patch_pod_annotations(cluster.ns, "a", mark, uid="a-pod-of-the-same-name-that-is-gone")
        client.patch_pod_annotations(cluster.ns, "a", mark, uid=uid["a"])
    finally:
        client.close()
    assert cluster.get_pod("a")["metadata"]["annotations"]["devshare.io/assigned"] == "true"


def _parked(port: int) -> float:
    """The extender's count of trade writes waiting for their partner's."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("devshare_extender_trade_writes_parked "))
