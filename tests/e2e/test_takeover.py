"""Taking over a live cluster from each peer (issue 36), on the real control plane: Nodes and their
devices as the peer reports them, running pods carrying exactly the peer's annotations (created
before devshare's admission sees them, as in a cluster devshare is installed into), devshare's
extender started on it, then new pods of every dialect scheduled by kube-scheduler through devshare
until the cluster is full. No card goes past 100% of its compute or memory counting the peer's pods;
HAMi and Volcano vGPU pods get the annotations their node side reads. The clusters are
tests/fixtures/peers/ (each file names the upstream files and commits its formats are pinned from)."""

from __future__ import annotations

import contextlib
import copy
import json
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from devshare.model.codecs import vgpu
from devshare.model.quantity import quantity_int
from e2e.cluster import SYSTEM_NS, ControlPlane, wait_until
from e2e.conftest import GROUP_LABEL, Cluster, _now

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
KOORD_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "devices.scheduling.koordinator.sh"},
    "spec": {"group": "scheduling.koordinator.sh", "scope": "Cluster",
             "names": {"plural": "devices", "singular": "device", "kind": "Device", "listKind": "DeviceList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}
# new pods, every dialect in turn (sized to fill the small clusters in a few dozen pods)
EVERY_DIALECT = [
    ("koordinator", {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "6Gi"}),
    ("hami", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000", "nvidia.com/gpucores": "30"}),
    ("volcano-vgpu", {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "6000", "volcano.sh/vgpu-cores": "25"}),
    ("volcano-gpushare", {"volcano.sh/gpu-memory": "6144"}),
    ("aliyun", {"aliyun.com/gpu-mem": "6000"}),
    ("koordinator-shared", {"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "40",
                            "koordinator.sh/gpu-memory-ratio": "30"}),
    ("mgpu", {"vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "6000"}),
    ("nvidia", {"nvidia.com/gpu": "1"}),
]
NODE_KEYS = ("hami.io/vgpu-node", "volcano.sh/vgpu-node")


@contextlib.contextmanager
def admission_off(cp: ControlPlane) -> Iterator[None]:
    """devshare's webhook configurations taken away while the peer's pods are made (they ran before
    devshare was installed: its admission never saw them), and put back."""
    cp.kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "devshare-webhook")
    try:
        yield
    finally:
        cp.apply(cp.webhook_configurations(f"https://127.0.0.1:{cp.webhook_port}"))


def peer_cluster(cluster: Cluster, peer: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The fixture's objects renamed into this test's group: node names prefixed, pods in its namespace."""
    docs = [d for d in yaml.safe_load_all((FIXTURES / f"{peer}.yaml").read_text()) if d]
    rename = {d["metadata"]["name"]: f"{cluster.group}-{d['metadata']['name']}" for d in docs if d["kind"] == "Node"}
    out = []
    for d in copy.deepcopy(docs):
        m = d["metadata"]
        if d["kind"] == "Node":
            m["name"] = rename[m["name"]]
            m.setdefault("labels", {}).update({GROUP_LABEL: cluster.group, "kubernetes.io/hostname": m["name"]})
            d["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                          "message": "e2e", "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]
        elif d["kind"] == "Device":
            m["name"] = rename[m["name"]]
            m.setdefault("labels", {})[GROUP_LABEL] = cluster.group
        else:
            m["namespace"] = cluster.ns
            m["name"] = f"{m['name']}"
            d["spec"]["nodeName"] = rename[d["spec"]["nodeName"]]
            for key in NODE_KEYS:
                if key in m.get("annotations", {}):
                    m["annotations"][key] = rename[m["annotations"][key]]
        out.append(d)
    return out, rename


def install_peer_cluster(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    cp = cluster.cp
    if any(o["kind"] == "Device" and o["apiVersion"].startswith("scheduling.koordinator.sh") for o in objects):
        cp.apply(KOORD_CRD)
        wait_until(lambda: cp.kubectl("get", "crd", "devices.scheduling.koordinator.sh", "-o",
                                      "jsonpath={.status.conditions[?(@.type=='Established')].status}"
                                      ).stdout == "True", timeout=60, what="Koordinator's Device CRD established")
    with admission_off(cp):
        for o in objects:
            status = o.pop("status", None) if o["kind"] == "Pod" else None
            cp.kubectl("create", "-f", "-", input=json.dumps(o))
            if status:
                cp.write_status("pod", o["metadata"]["name"], status, namespace=cluster.ns)
    # devshare's extender starts on the cluster as the peer left it (as after `kubectl apply -k deploy/`),
    # and leads before new pods come (a Lease an earlier test left takes its duration to lapse)
    proc = cp.processes["extender"]
    proc.signal(signal.SIGTERM)
    proc.popen.wait(30)  # type: ignore[union-attr]
    new = cp.start_extender()
    assert new.popen is not None
    me = f"{socket.gethostname()}-{new.popen.pid}"
    wait_until(lambda: (cp.get("lease", "devshare-extender", "-n", SYSTEM_NS)["spec"].get("holderIdentity") == me),
               timeout=90, interval=0.5, what="the restarted extender leading")


def fill(cluster: Cluster, limit: int = 60) -> list[tuple[str, str, dict[str, Any]]]:
    """New pods of every dialect in turn until a whole round of them stays pending; the bound ones."""
    bound: list[tuple[str, str, dict[str, Any]]] = []
    misses = 0
    for i in range(limit):
        dialect, ask = EVERY_DIALECT[i % len(EVERY_DIALECT)]
        name = f"new-{i}-{dialect}"
        cluster.pod(name, ask)

        def settled(name: str = name) -> dict[str, Any] | None:
            p = cluster.get_pod(name)
            if p["spec"].get("nodeName") or cluster.events(name, "FailedScheduling"):
                return p
            return None
        pod = wait_until(settled, timeout=60, interval=0.2, what=f"pod {name} bound or refused")
        if pod["spec"].get("nodeName"):
            bound.append((dialect, name, pod))
            misses = 0
        else:
            misses += 1
            if misses >= len(EVERY_DIALECT):
                return bound
    raise AssertionError(f"the cluster never filled up with {limit} pods")


def check_no_card_over_full(cluster: Cluster, nodes: set[str]) -> dict[str, Any]:
    view = cluster.inspect()
    seen = 0
    for n in view["nodes"]:
        for d in n["devices"]:
            seen += 1
            assert d["used"]["core"] <= d["total"]["core"], (n["name"], d)
            assert d["used"].get("memory", 0) <= d["total"].get("memory", 0), (n["name"], d)
    assert seen and {n["name"] for n in view["nodes"]} == nodes
    return view


def check_node_side_annotations(dialect: str, pod: dict[str, Any], register: dict[str, set[str]]) -> None:
    """What HAMi's device plugin and Volcano's vgpu plugin read: the node, the phase, and per
    container the devices, on the node's registered cards, with the container's own ask."""
    ann, node = pod["metadata"]["annotations"], pod["spec"]["nodeName"]
    prefix = "hami.io" if dialect == "hami" else "volcano.sh"
    allocated = ann["hami.io/vgpu-devices-allocated"] if dialect == "hami" else ann["volcano.sh/vgpu-ids-new"]
    to_allocate = ann[f"{prefix}/vgpu-devices-to-allocate" if dialect == "hami" else "volcano.sh/devices-to-allocate"]
    assert ann[f"{prefix}/vgpu-node"] == node and ann[f"{prefix}/bind-phase"] == "allocating"
    assert ann[f"{prefix}/bind-time"].isdigit() and ann[f"{prefix}/vgpu-time"].isdigit()
    assert allocated == to_allocate
    containers, problems = vgpu.decode_containers(allocated)
    assert problems == [] and len(containers) == len(pod["spec"]["containers"])
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    ((dev,),) = containers
    assert dev.type == "NVIDIA" and dev.uuid in register.get(node, {dev.uuid})
    mem_key, core_key = (("nvidia.com/gpumem", "nvidia.com/gpucores") if dialect == "hami"
                         else ("volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores"))
    # the API server writes quantities back in its own form ("6000" comes back "6k")
    assert (dev.memory_mib, dev.cores) == (quantity_int(limits[mem_key]), quantity_int(limits[core_key]))


def run(cluster: Cluster, peer: str) -> None:
    objects, rename = peer_cluster(cluster, peer)
    peer_pods = {o["metadata"]["name"] for o in objects if o["kind"] == "Pod"
                 and (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
    install_peer_cluster(cluster, objects)
    nodes = set(rename.values())
    # the peer's pods are counted from its own annotations, nothing conservative in a healthy cluster
    view = check_no_card_over_full(cluster, nodes)
    counted = {p["pod"].split("/", 1)[1]: p for p in view.get("placedByPeers", []) if p["node"] in nodes}
    assert set(counted) == peer_pods and all(p["problems"] == [] for p in counted.values()), counted
    before = {(n["name"], d["type"], d["minor"]): d["used"] for n in view["nodes"] for d in n["devices"]}
    assert any(u["core"] or u.get("memory") for u in before.values())
    bound = fill(cluster)
    assert len({d for d, _, _ in bound}) >= 5, [d for d, _, _ in bound]
    after = check_no_card_over_full(cluster, nodes)
    # nothing the peer's pods hold was handed out again: every card holds at least what it held
    for n in after["nodes"]:
        for d in n["devices"]:
            was = before[(n["name"], d["type"], d["minor"])]
            assert d["used"]["core"] >= was["core"] and d["used"].get("memory", 0) >= was.get("memory", 0)
    register = {}
    for o in objects:
        ann = o["metadata"].get("annotations") or {}
        if o["kind"] == "Node" and "hami.io/node-nvidia-register" in ann:
            text = ann["hami.io/node-nvidia-register"]
            register[o["metadata"]["name"]] = ({e["id"] for e in json.loads(text)} if text.startswith("[")
                                               else {p.split(",")[0] for p in text.split(":") if p})
        if o["kind"] == "Node" and "volcano.sh/node-vgpu-register" in ann:
            register[o["metadata"]["name"]] = {p.split(",")[0] for p in ann["volcano.sh/node-vgpu-register"].split(":")
                                               if p}
    for dialect, _, pod in bound:
        if dialect in ("hami", "volcano-vgpu"):
            check_node_side_annotations(dialect, pod, register)
    for o in objects:
        if o["kind"] == "Device" and o["apiVersion"].startswith("scheduling.koordinator.sh"):
            cluster.cp.kubectl("delete", "devices.scheduling.koordinator.sh", o["metadata"]["name"], "--wait=false")
    cluster.cp.kubectl("delete", "nodes", "-l", f"{GROUP_LABEL}={cluster.group}", "--wait=false")


def test_takeover_from_hami(cluster: Cluster) -> None:
    run(cluster, "hami")


def test_takeover_from_koordinator(cluster: Cluster) -> None:
    try:
        run(cluster, "koordinator")
    finally:
        cluster.cp.kubectl("delete", "crd", "devices.scheduling.koordinator.sh", "--wait=false", check=False)


def test_takeover_from_volcano(cluster: Cluster) -> None:
    run(cluster, "volcano")


def test_takeover_from_aliyun(cluster: Cluster) -> None:
    run(cluster, "aliyun")
