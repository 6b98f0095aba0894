"""DRA on the real control plane (v1.37, stock kube-scheduler, default feature gates: resource.k8s.io/v1
and consumable capacity need no flag): devshare's webhook gates pods whose claims use its
DeviceClasses, the extender's allocator writes status.allocation and lifts the gate, kube-scheduler
places the pod where the allocation says. Claims and extended-resource pods of every dialect share the
same cards and are never over-booked together; a kill -9 of the extender mid-stream loses nothing and
allocates nothing twice.

No kube-controller-manager runs here: the test makes a template's claim as its resourceclaim
controller would (owned by the pod, named in the pod's status.resourceClaimStatuses)."""

from __future__ import annotations

import json
import signal
from collections import defaultdict
from typing import Any

from e2e.cluster import wait_until
from e2e.conftest import Cluster, allocation

DRIVER = "gpu.devshare.io"
GiB = 2**30


def template(cluster: Cluster, name: str, requests: list[dict[str, Any]],
             constraints: list[dict[str, Any]] | None = None) -> None:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    cluster.cp.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                      "metadata": {"name": name, "namespace": cluster.ns}, "spec": {"spec": {"devices": devices}}})


def share(compute: str, memory: str | None = None, *, cls: str = "gpu.devshare.io", count: int | None = None,
          name: str = "gpu") -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": cls}
    caps = {"compute": compute} if compute else {}
    if memory:
        caps["memory"] = memory
    if caps:
        ex["capacity"] = {"requests": caps}
    if count is not None:
        ex["count"] = count
    return {"name": name, "exactly": ex}


def claim_pod(cluster: Cluster, name: str, tmpl: str) -> None:
    """A pod whose claim comes from ``tmpl``; its claim is made as the resourceclaim controller makes it."""
    obj = cluster.pod(name, create=False)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": tmpl}]
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    cluster.cp.kubectl("create", "-f", "-", input=json.dumps(obj))
    pod = cluster.get_pod(name)
    gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    assert "devshare.io/dra-allocation" in gates, gates  # the webhook holds it for devshare's allocator
    spec = cluster.cp.get("resourceclaimtemplate", tmpl, "-n", cluster.ns)["spec"]["spec"]
    claim = f"{name}-gpu"
    cluster.cp.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": claim, "namespace": cluster.ns,
                     "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                          "uid": pod["metadata"]["uid"], "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": spec}))
    cluster.cp.write_status("pod", name, {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim}]},
                            namespace=cluster.ns)


def claims(cluster: Cluster) -> list[dict[str, Any]]:
    return cluster.cp.get("resourceclaims", "-n", cluster.ns)["items"]  # type: ignore[no-any-return]


def usage(cluster: Cluster) -> dict[tuple[str, int], list[float]]:
    """Per (node, GPU minor): [compute %, memory bytes] consumed, counted from the API objects alone:
    every claim's consumedCapacity and every bound pod's devshare allocation."""
    used: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for c in claims(cluster):
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            if r["driver"] != DRIVER:
                continue
            minor = int(r["device"].split("-")[1])
            cap = r.get("consumedCapacity") or {"compute": "100"}
            used[(r["pool"], minor)][0] += float(cap.get("compute", "100"))
            mem = cap.get("memory", "0")
            used[(r["pool"], minor)][1] += (int(mem[:-2]) * GiB if mem.endswith("Gi")
                                            else int(mem[:-2]) * 2**20 if mem.endswith("Mi") else int(mem))
    for p in cluster.pods():
        if p["spec"].get("nodeName") and "devshare.io/allocation" in (p["metadata"].get("annotations") or {}):
            a = allocation(p)
            for c in a["containers"]:
                for d in c["devices"]:
                    if d["type"] == "gpu":
                        used[(a["node"], d["minor"])][0] += d.get("core", 0)
                        used[(a["node"], d["minor"])][1] += d.get("memory", 0)
    return dict(used)


def assert_never_overbooked(cluster: Cluster, memory_gib: int) -> None:
    for (node, minor), (core, mem) in usage(cluster).items():
        assert core <= 100 + 1e-9, f"{node} gpu {minor}: {core}% compute"
        assert mem <= memory_gib * GiB, f"{node} gpu {minor}: {mem / GiB:.1f} GiB"


# what HAMi's and Volcano's device plugins advertise on their nodes (their names are not devshare's
# managedResources: kube-scheduler checks them against the node's allocatable)
PEER_ALLOCATABLE = {"nvidia.com/gpumem": "1000000", "nvidia.com/gpucores": "1000", "volcano.sh/vgpu-number": "100",
                    "volcano.sh/vgpu-memory": "1000000", "volcano.sh/vgpu-cores": "1000"}


def test_claims_of_30_percent_and_6gib_share_cards_with_every_dialect(cluster: Cluster) -> None:
    # one node of two cards, so that whatever way devshare packs them the last claim's fate is known (with
    # two nodes, a tight packing left a whole card free and the test depended on the packing)
    cluster.nodes(["dra-mix-1"], gpus=2, memory_gib=32)
    for n in ("dra-mix-1",):
        node = cluster.cp.get("node", n)
        cluster.cp.write_status("node", n, {"capacity": {**node["status"]["capacity"], **PEER_ALLOCATABLE},
                                            "allocatable": {**node["status"]["allocatable"], **PEER_ALLOCATABLE}})
    wait_until(lambda: all(cluster.cp.kubectl("get", "resourceslice", f"{n}-{DRIVER}", check=False).returncode == 0
                           for n in ("dra-mix-1",)), timeout=60, what="ResourceSlices published")
    template(cluster, "share", [share("30", "6Gi")])
    for i in range(4):
        claim_pod(cluster, f"claim-{i}", "share")
    dialects = [{"koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory": "2Gi"},
                {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"},
                {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1024", "volcano.sh/vgpu-cores": "10"},
                {"vke.volcengine.com/mgpu-core": "10", "vke.volcengine.com/mgpu-memory": "1024"},
                {"aliyun.com/gpu-mem": "1024"}]
    for i, ask in enumerate(dialects):
        cluster.pod(f"ext-{i}", ask)
    for i in range(4):
        pod = cluster.wait_bound(f"claim-{i}", timeout=60)
        (c,) = [c for c in claims(cluster) if c["metadata"]["name"] == f"claim-{i}-gpu"]
        alloc = c["status"]["allocation"]
        (res,) = alloc["devices"]["results"]
        assert res["consumedCapacity"] == {"compute": "30", "memory": "6Gi"} and res["shareID"]
        assert res["pool"] == pod["spec"]["nodeName"]  # kube-scheduler honoured the nodeSelector
        assert [r["name"] for r in c["status"].get("reservedFor", [])] == [f"claim-{i}"]
    for i in range(len(dialects)):
        cluster.wait_bound(f"ext-{i}", timeout=60)
    assert_never_overbooked(cluster, 32)
    # 4 x 30% and the dialects' 50% on 2 cards leave at most 30% on either; the claims alone would leave
    # 40% or 70% on one: a claim of 35% is refused only where both kinds are counted
    template(cluster, "big", [share("35", "1Gi")])
    claim_pod(cluster, "big", "big")
    cluster.wait_event("big", "FailedDRAAllocation", timeout=60)
    assert not cluster.get_pod("big")["spec"].get("nodeName")
    assert_never_overbooked(cluster, 32)


def test_whole_gpus_and_a_multi_gpu_claim_takes_the_fastest_pair(cluster: Cluster) -> None:
    fast = [[0, 50, 300, 50], [50, 0, 50, 50], [300, 50, 0, 50], [50, 50, 50, 0]]  # GPUs 0 and 2: the fast link
    cluster.nodes(["dra-topo-1"], gpus=4, matrix=fast)
    wait_until(lambda: cluster.cp.kubectl("get", "resourceslice", f"dra-topo-1-{DRIVER}", check=False).returncode == 0,
               timeout=60, what="ResourceSlice published")
    template(cluster, "pair", [share("", cls="whole-gpu.devshare.io", count=2, name="gpus")])
    claim_pod(cluster, "pair", "pair")
    cluster.wait_bound("pair", timeout=60)
    (c,) = [c for c in claims(cluster) if c["metadata"]["name"] == "pair-gpu"]
    devices = sorted(r["device"] for r in c["status"]["allocation"]["devices"]["results"])
    assert devices == ["gpu-0", "gpu-2"]
    template(cluster, "one", [share("")])  # no capacity asked: a whole GPU
    claim_pod(cluster, "one", "one")
    cluster.wait_bound("one", timeout=60)
    # two whole GPUs left taken by claims: an extended-resource pod asking three does not fit, two do
    cluster.pod("ext-3", {"nvidia.com/gpu": "3"})
    cluster.pod("ext-1", {"nvidia.com/gpu": "1"})
    cluster.wait_bound("ext-1", timeout=60)
    wait_until(lambda: cluster.events("ext-3"), timeout=60, what="ext-3 refused")
    assert not cluster.get_pod("ext-3")["spec"].get("nodeName")
    assert_never_overbooked(cluster, 16)


def test_kill_9_mid_stream_loses_nothing_and_allocates_nothing_twice(cluster: Cluster) -> None:
    cluster.nodes(["dra-kill-1", "dra-kill-2"], gpus=2, memory_gib=16)
    wait_until(lambda: all(cluster.cp.kubectl("get", "resourceslice", f"{n}-{DRIVER}", check=False).returncode == 0
                           for n in ("dra-kill-1", "dra-kill-2")), timeout=60, what="ResourceSlices published")
    template(cluster, "quarter", [share("25", "4Gi")])
    n = 16  # exactly the 4 cards
    for i in range(n // 2):
        claim_pod(cluster, f"k-{i}", "quarter")
    cp = cluster.cp
    cp.processes["extender"].signal(signal.SIGKILL)
    cp.processes["extender"].popen.wait()  # type: ignore[union-attr]
    for i in range(n // 2, n):
        claim_pod(cluster, f"k-{i}", "quarter")
    cp.start_extender()
    for i in range(n):
        cluster.wait_bound(f"k-{i}", timeout=90)
    assert_never_overbooked(cluster, 16)
    per_device = usage(cluster)
    assert sorted(v[0] for v in per_device.values()) == [100.0] * 4  # every card exactly full, none twice
    # one more fits nowhere, and says so
    claim_pod(cluster, "extra", "quarter")
    cluster.wait_event("extra", "FailedDRAAllocation", timeout=60)


def test_a_claim_kube_scheduler_allocated_on_devshare_devices_is_counted(cluster: Cluster) -> None:
    """devshare reads every claim: one of another DeviceClass, allocated by kube-scheduler itself on a
    device devshare publishes, holds that device for extended-resource pods too."""
    cluster.nodes(["dra-foreign-1"], gpus=1, memory_gib=16)
    wait_until(lambda: cluster.cp.kubectl("get", "resourceslice", f"dra-foreign-1-{DRIVER}",
                                          check=False).returncode == 0, timeout=60, what="ResourceSlice published")
    foreign = f"gpu.{cluster.group}.example.com"
    cluster.cp.apply({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": foreign},
                      "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    template(cluster, "theirs", [share("60", cls=foreign)])
    claim_pod_ungated(cluster, "theirs", "theirs")
    cluster.wait_bound("theirs", timeout=60)  # kube-scheduler allocated it: no gate, not devshare's class
    cluster.pod("fits", {"koordinator.sh/gpu-core": "40", "koordinator.sh/gpu-memory": "1Gi"})
    cluster.pod("too-big", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "1Gi"})
    cluster.wait_bound("fits", timeout=60)
    wait_until(lambda: cluster.events("too-big", "FailedScheduling"), timeout=60, what="too-big refused")
    assert not cluster.get_pod("too-big")["spec"].get("nodeName")
    assert_never_overbooked(cluster, 16)


def claim_pod_ungated(cluster: Cluster, name: str, tmpl: str) -> None:
    """:func:`claim_pod` for a class devshare does not serve: the webhook leaves the pod ungated."""
    obj = cluster.pod(name, create=False)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": tmpl}]
    cluster.cp.kubectl("create", "-f", "-", input=json.dumps(obj))
    pod = cluster.get_pod(name)
    assert not pod["spec"].get("schedulingGates")
    spec = cluster.cp.get("resourceclaimtemplate", tmpl, "-n", cluster.ns)["spec"]["spec"]
    cluster.cp.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-gpu", "namespace": cluster.ns,
                     "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name,
                                          "uid": pod["metadata"]["uid"], "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": spec}))
    statuses = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    cluster.cp.write_status("pod", name, {"resourceClaimStatuses": statuses}, namespace=cluster.ns)
