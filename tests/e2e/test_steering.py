"""The steering taint on the real control plane (issue 41): the extender's leader marks each node that
holds a GPU nobody uses with devshare.io/whole-gpu-free:PreferNoSchedule and unmarks it once its GPUs are
all in use, keeping every other taint; deploy/scheduler/node-writes.yaml lets the scheduler's identity
change that taint and nothing else of a Node."""

from __future__ import annotations

import json
from typing import Any

from e2e.cluster import wait_until
from e2e.conftest import Cluster

KEY = "devshare.io/whole-gpu-free"
WHOLE = {"nvidia.com/gpu": "1"}
OPERATORS = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def taints(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    return list(cluster.cp.get("node", node)["spec"].get("taints") or [])


def marked(cluster: Cluster, node: str) -> bool:
    return any(t["key"] == KEY for t in taints(cluster, node))


def test_a_node_is_marked_while_a_gpu_on_it_is_free_and_unmarked_once_all_are_used(cluster: Cluster) -> None:
    node = cluster.node("steer-two", gpus=2)
    wait_until(lambda: marked(cluster, node), timeout=60, what="the steering taint on a node with free GPUs")
    (mine,) = [t for t in taints(cluster, node) if t["key"] == KEY]
    assert mine == {"key": KEY, "effect": "PreferNoSchedule"}
    cluster.pod("first", WHOLE)
    cluster.wait_bound("first", timeout=60)
    assert marked(cluster, node)  # one GPU still free: stays marked
    cluster.pod("second", WHOLE)
    cluster.wait_bound("second", timeout=60)
    wait_until(lambda: not marked(cluster, node), timeout=60, what="the taint gone once every GPU is used")
    cluster.delete_pod("second")
    wait_until(lambda: marked(cluster, node), timeout=60, what="the taint back once a GPU is free again")


def test_an_operators_taint_is_kept_beside_it(cluster: Cluster) -> None:
    node = cluster.node("steer-kept", gpus=1)
    cluster.cp.kubectl("taint", "node", node, "dedicated=ml:NoSchedule")
    wait_until(lambda: marked(cluster, node), timeout=60, what="the steering taint")
    assert {"key": "dedicated", "value": "ml", "effect": "NoSchedule"} in taints(cluster, node)


def test_the_scheduler_identity_may_change_that_taint_only(cluster: Cluster) -> None:
    cp = cluster.cp
    node = cluster.node("steer-pin", gpus=0)  # no GPU: devshare leaves it unmarked
    who = cp.token_kubeconfig("devshare-scheduler")
    policy = "ValidatingAdmissionPolicy 'devshare-scheduler-node-writes'"

    def patch(body: object, kind: str = "merge") -> str:
        out = cp.kubectl("patch", "node", node, f"--type={kind}", "-p", json.dumps(body), as_=who, check=False)
        return "" if out.returncode == 0 else out.stderr

    assert patch({"spec": {"taints": [{"key": KEY, "effect": "PreferNoSchedule"}]}}) == ""
    assert patch({"spec": {"taints": []}}) == ""
    for body in ({"spec": {"taints": [OPERATORS]}},
                 {"spec": {"taints": [{"key": KEY, "effect": "NoSchedule"}]}},
                 {"spec": {"taints": [{"key": KEY, "value": "x", "effect": "PreferNoSchedule"}]}}):
        err = patch(body)
        assert policy in err and "may only add or remove the taint" in err, (body, err)
    for body in ({"spec": {"unschedulable": True}}, {"metadata": {"labels": {"tier": "gold"}}},
                 {"metadata": {"annotations": {"note": "x"}}}):
        err = patch(body)
        assert policy in err and "may change nothing of node" in err, (body, err)
    got = cp.get("node", node)
    assert not got["spec"].get("unschedulable") and "tier" not in got["metadata"]["labels"]
    cp.kubectl("label", "node", node, "tier=gold")  # the admin is not concerned by the policy
