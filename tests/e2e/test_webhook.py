"""The admission webhook through the real API server, registered by deploy/webhook/webhooks.yaml:
an invalid mGPU pod is refused at creation with the seed's reason, the ``kubernetes.io/gpu-*``
spellings are rewritten so the pod reaches devshare, and pods asking for no device are untouched."""

from __future__ import annotations

import json

from e2e.cluster import SCHEDULER_NAME
from e2e.conftest import Cluster, allocation


def test_invalid_mgpu_pod_is_refused_at_create_with_the_reason(cluster: Cluster) -> None:
    cluster.node("wh-mgpu", gpus=4, labels={"devshare.io/multi-gpu-share": "true",
                                            "devshare.io/gpu-compute-policy": "native-burst-share"})
    obj = cluster.pod("bad", [{"vke.volcengine.com/mgpu-core": "100"}], create=False,
                      annotations={"vke.volcengine.com/container-multiple-gpu": "3",
                                   "devshare.io/gpu-compute-policy": "native-burst-share"})
    out = cluster.cp.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0
    assert 'admission webhook "validate.webhook.devshare.io" denied the request' in out.stderr
    assert "vke.volcengine.com/mgpu-core=100 does not divide evenly over 3 cards" in out.stderr
    assert "NotFound" in cluster.cp.kubectl("get", "pod", "bad", "-n", cluster.ns, check=False).stderr


def test_kubernetes_io_spellings_are_rewritten_and_scheduled(cluster: Cluster) -> None:
    cluster.node("wh-koord", gpus=1)
    cluster.pod("old", {"kubernetes.io/gpu-core": "40", "kubernetes.io/gpu-memory-ratio": "40"}, scheduler=None)
    pod = cluster.wait_bound("old", timeout=60)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"koordinator.sh/gpu-core": "40", "koordinator.sh/gpu-memory-ratio": "40"}
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    assert allocation(pod)["containers"][0]["devices"][0]["core"] == 40


def test_pods_without_devices_are_untouched(cluster: Cluster) -> None:
    obj = cluster.pod("plain", {"cpu": "100m"}, scheduler=None, node_selector=False, create=False)
    cluster.cp.kubectl("create", "-f", "-", input=json.dumps(obj))
    pod = cluster.get_pod("plain")
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert not (pod["metadata"].get("annotations") or {})
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "100m"}, "requests": {"cpu": "100m"}}


FORGED = json.dumps({"node": "NODE", "containers": [{"name": "c0", "devices": [
    {"type": "gpu", "minor": 0, "id": "GPU-NODE-0", "core": 100, "memory": 17179869184}]}]})


def test_users_cannot_write_allocations_on_pods(cluster: Cluster) -> None:
    """Issue 12: a pod created with spec.nodeName and its own devshare.io/allocation was admitted and
    counted (GPU 0 at 165%). The allocations webhook refuses it, whoever asks except devshare itself,
    the opt-out label notwithstanding; on a pod devshare bound, a user may change anything but the
    allocation annotations, and the node agent may mark it assigned."""
    cp = cluster.cp
    node = cluster.node("wh-forge", gpus=1)
    forged = FORGED.replace("NODE", node)
    # a device pod pinned to the node with an allocation of its own, opted out of the other webhooks
    obj = cluster.pod("forged", {"koordinator.sh/gpu-core": "100"}, create=False,
                      annotations={"devshare.io/allocation": forged}, labels={"devshare.io/webhook": "disabled"})
    obj["spec"]["nodeName"] = node
    out = cp.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0
    assert 'admission webhook "allocations.webhook.devshare.io" denied the request' in out.stderr
    assert "devshare.io/allocation may only be written by devshare" in out.stderr
    # a pod asking for nothing, carrying a dialect's allocation: refused as well
    plain = cluster.pod("plain-forged", {"cpu": "10m"}, scheduler=None, create=False,
                        annotations={"scheduling.koordinator.sh/device-allocated": '{"gpu":[{"minor":0}]}'})
    out = cp.kubectl("create", "-f", "-", input=json.dumps(plain), check=False)
    assert out.returncode != 0  # both validating webhooks see this one: either answers first
    assert "scheduling.koordinator.sh/device-allocated may only be written by devshare" in out.stderr

    # a pod devshare placed: its allocation is devshare's
    cluster.pod("real", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    real = cluster.wait_bound("real", timeout=60)
    assert allocation(real)["containers"][0]["devices"][0]["core"] == 50
    out = cp.kubectl("annotate", "pod", "real", "-n", cluster.ns, "--overwrite",
                     f"devshare.io/allocation={forged}", check=False)
    assert out.returncode != 0 and "may only be changed by devshare" in out.stderr
    out = cp.kubectl("annotate", "pod", "real", "-n", cluster.ns, "devshare.io/allocation-", check=False)
    assert out.returncode != 0 and "may only be changed by devshare" in out.stderr
    cp.kubectl("label", "pod", "real", "-n", cluster.ns, "tier=gold")  # anything else goes
    assert allocation(cluster.get_pod("real"))["containers"][0]["devices"][0]["core"] == 50
    assert cluster.inspect()["nodes"][0]["devices"][0]["used"]["core"] == 50


def test_only_devshare_binds_device_pods(cluster: Cluster) -> None:
    """Seed 001's upgrade webhook: a Binding of a device pod made by anyone but devshare (the cluster
    admin through pods/binding, a ServiceAccount allowed to bind through the older bindings resource)
    is refused by bindings.webhook.devshare.io, so a second scheduler cannot hand out cards devshare
    never counted; a pod asking for no device is bound by anyone allowed to, and devshare's own
    scheduler still binds device pods."""
    cp, ns = cluster.cp, cluster.ns
    node = cluster.node("wh-bind", gpus=1)
    gpu = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
    # device pods that name another scheduler on purpose (none runs here: the test plays it)
    cluster.pod("theirs", gpu, scheduler="volcano")

    def binding(pod: str) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": ns},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    out = cp.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/theirs/binding", "-f", "-",
                     input=binding("theirs"), check=False)
    assert out.returncode != 0
    assert 'admission webhook "bindings.webhook.devshare.io" denied the request' in out.stderr
    assert f"pod {ns}/theirs asks for koordinator.sh/gpu-core, koordinator.sh/gpu-memory-ratio" in out.stderr
    assert "not by e2e-admin" in out.stderr

    # a ServiceAccount allowed by RBAC to bind pods (as a second scheduler's is)
    cp.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "binder", "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "binder", "namespace": ns},
         "rules": [{"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]},
                   {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "binder", "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
         "subjects": [{"kind": "ServiceAccount", "name": "binder", "namespace": ns}]},
    ])
    binder = cp.token_kubeconfig("binder", ns)
    out = cp.kubectl("create", "--validate=false", "-f", "-", input=binding("theirs"), as_=binder, check=False)
    assert out.returncode != 0
    assert 'admission webhook "bindings.webhook.devshare.io" denied the request' in out.stderr
    assert f"not by system:serviceaccount:{ns}:binder" in out.stderr
    assert not cluster.get_pod("theirs")["spec"].get("nodeName")

    # a pod asking for no device: bound by the admin and by the ServiceAccount alike
    for pod, who in (("plain", None), ("plain-2", binder)):
        cluster.pod(pod, {"cpu": "10m"}, scheduler="volcano")
        cp.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/binding", "-f", "-",
                   input=binding(pod), as_=who)
        assert cluster.get_pod(pod)["spec"]["nodeName"] == node

    # devshare's scheduler binds a device pod, and the card holds it alone
    cluster.pod("mine", gpu)
    mine = cluster.wait_bound("mine", timeout=60)
    assert allocation(mine)["containers"][0]["devices"][0]["core"] == 50
    assert not cluster.get_pod("theirs")["spec"].get("nodeName")
    assert cluster.inspect()["nodes"][0]["devices"][0]["pods"] == [f"{ns}/mine/c0"]
