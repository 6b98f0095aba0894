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
