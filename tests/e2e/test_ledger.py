"""The claim ledger heals on the real control plane (issue 37, item 2): a ledger ConfigMap holding
garbage refuses every bind; once it is deleted, or repaired by hand, pods are bound again without
restarting the extender."""

from __future__ import annotations

import json

from devshare.kube.ledger import NAME
from e2e.cluster import SYSTEM_NS
from e2e.conftest import Cluster

ASK = {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "30"}


def _garbage(cluster: Cluster) -> None:
    cluster.cp.apply({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": NAME, "namespace": SYSTEM_NS,
                                   "labels": {"devshare.io/claim-ledger": "v2"}},
                      "data": {"claims": "[{hand-edited", "watermark": ""}})


def _refused(cluster: Cluster, name: str) -> None:
    """kube-scheduler reports the extender's refusal of the bind (the ledger cannot be read)."""
    ev = cluster.wait_event(name, "FailedScheduling", timeout=120)
    assert "claim ledger" in ev["message"], ev["message"]
    assert not cluster.get_pod(name)["spec"].get("nodeName")


def test_a_broken_ledger_refuses_binds_until_it_is_deleted_or_repaired(cluster: Cluster) -> None:
    cp = cluster.cp
    cluster.node("ledger-1", gpus=2)
    _garbage(cluster)
    try:
        cluster.pod("deleted-fix", ASK)
        _refused(cluster, "deleted-fix")
        cp.kubectl("delete", "configmap", NAME, "-n", SYSTEM_NS)
        # kube-scheduler retries within its backoff (at most 10 s); no restart of the extender
        cluster.wait_bound("deleted-fix", timeout=120)

        _garbage(cluster)
        cluster.pod("repaired", ASK)
        _refused(cluster, "repaired")
        ledger = cp.get("configmap", NAME, "-n", SYSTEM_NS)
        ledger["data"] = {"claims": "[]", "watermark": ""}
        cp.kubectl("replace", "-f", "-", input=json.dumps(ledger))
        cluster.wait_bound("repaired", timeout=120)
    finally:
        cp.kubectl("delete", "configmap", NAME, "-n", SYSTEM_NS, "--ignore-not-found")
