"""Preemption for GPUs through the real kube-scheduler.

v1.37's DefaultPreemption re-runs only kube-scheduler's own filters when it looks for victims; the
devices are ignored by its resource fit, so it finds none and never calls the extender's ``/preempt``.
The extender preempts itself (docs/extender.md): the high-priority pod evicts the cheapest
lower-priority GPU pods and takes their devices."""

from __future__ import annotations

from e2e.cluster import wait_until
from e2e.conftest import Cluster, allocation

WHOLE = {"nvidia.com/gpu": "1"}


def _classes(cluster: Cluster) -> None:
    cluster.cp.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": name}, "value": value}
                      for name, value in (("e2e-low", 10), ("e2e-mid", 100), ("e2e-high", 1000))])


def test_high_priority_gpu_pod_preempts_lower_priority_gpu_pods(cluster: Cluster) -> None:
    _classes(cluster)
    cluster.nodes(["pre-1", "pre-2"], gpus=1)
    cluster.pod("low", WHOLE, priority_class="e2e-low")
    cluster.pod("mid", WHOLE, priority_class="e2e-mid")
    low, mid = cluster.wait_bound("low"), cluster.wait_bound("mid")
    assert {low["spec"]["nodeName"], mid["spec"]["nodeName"]} == {"pre-1", "pre-2"}

    cluster.pod("high", WHOLE, priority_class="e2e-high")
    high = cluster.wait_bound("high", timeout=90)
    assert high["spec"]["nodeName"] == low["spec"]["nodeName"]  # the cheapest victim's node
    assert allocation(high)["containers"][0]["devices"][0]["core"] == 100
    wait_until(lambda: "NotFound" in cluster.cp.kubectl("get", "pod", "low", "-n", cluster.ns, check=False).stderr,
               what="the victim deleted")
    assert cluster.get_pod("mid")["spec"]["nodeName"]  # the pricier victim is spared
    events = cluster.cp.get("events", "-n", cluster.ns)["items"]
    assert any(e["reason"] == "Preempted" and e["involvedObject"]["name"] == "low" for e in events)


def test_equal_priority_does_not_preempt(cluster: Cluster) -> None:
    _classes(cluster)
    cluster.node("eq-1", gpus=1)
    cluster.pod("first", WHOLE, priority_class="e2e-mid")
    cluster.wait_bound("first")
    cluster.pod("second", WHOLE, priority_class="e2e-mid")
    cluster.wait_event("second", "FailedScheduling")
    assert cluster.get_pod("first")["spec"]["nodeName"] == "eq-1"
