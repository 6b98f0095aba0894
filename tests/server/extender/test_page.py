"""What /ui shows beside the cards (server/extender/page.py): the queue, the quotas, the configuration."""

from __future__ import annotations

from devshare.config import Configuration, NamespaceQuota, Scheduling
from devshare.engine.build import quotas_of
from devshare.server.extender.page import config_summary, take_queue, take_quotas
from devshare.server.extender.refused import RefusalLog
from support.extender import GiB, pod


def waiting(name: str, **kw: object) -> dict[str, object]:
    p = pod(name, **kw)  # type: ignore[arg-type]
    p["metadata"]["creationTimestamp"] = "2026-11-28T10:00:00Z"
    return p


def test_the_queue_lists_refused_pods_first_then_the_waiting_ones() -> None:
    refusals = RefusalLog(lambda: 50.0)
    refusals.refused("default/big", "filter", "3 nodes: no card is that large", 3)
    refusals.refused("other/gone", "bind", "n1: taken")  # refused, no longer kept as pending
    pending = {"default/big": waiting("big", gpus=8), "default/small": waiting("small", core=20, mem="2Gi")}
    q = take_queue(pending, refusals)
    assert (q["pending"], q["refused"], q["total"]) == (2, 2, 3)
    assert [p["pod"] for p in q["pods"]] == ["other/gone", "default/big", "default/small"]
    big = q["pods"][1]
    assert big["pending"] and big["since"] == "2026-11-28T10:00:00Z"
    assert big["refusals"] == [{"verb": "filter", "at": 50.0, "reason": "3 nodes: no card is that large", "nodes": 3}]
    assert big["asks"] == {"nvidia.com/gpu": "8"}
    assert q["pods"][2]["asks"] == {"koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory": "2Gi"}
    assert not q["pods"][0]["pending"] and q["pods"][0]["refusals"][0]["verb"] == "bind"
    assert len(take_queue(pending, refusals, limit=2)["pods"]) == 2


def test_quotas_by_namespace_used_and_limit() -> None:
    quotas = quotas_of(Configuration(quotas={"team-a": NamespaceQuota(gpu_core=200, gpu_memory="16Gi"),
                                             "team-b": NamespaceQuota(gpu_memory="32Gi")}))
    out = take_quotas(quotas, {"team-a": [500, 4 * GiB], "team-c": [1000, GiB]})
    assert out["configured"] == 2 and out["total"] == 3
    rows = {r["namespace"]: r for r in out["namespaces"]}
    assert rows["team-a"] == {"namespace": "team-a", "core": {"used": 50.0, "limit": 200.0},
                              "memory": {"used": 4 * GiB, "limit": 16 * GiB}}
    assert rows["team-b"]["core"] == {"used": 0.0, "limit": None} and rows["team-b"]["memory"]["limit"] == 32 * GiB
    assert rows["team-c"]["core"]["limit"] is None  # holds GPUs, no quota
    assert take_quotas(None, {})["namespaces"] == []


def test_the_configuration_is_shown_by_its_file_names() -> None:
    c = config_summary(Configuration(scheduling=Scheduling(node_policy="spread", shortlist=1)))
    assert c["policy"] == "spread" and c["cardPolicy"] == "auto"
    assert c["scheduling"]["shortlist"] == 1 and c["scheduling"]["assumeTTLSeconds"] == 60.0
    assert c["scheduling"]["maxContainersPerCard"] == 16
    assert c["disabledDeviceTypes"] == [] and c["quotas"] == 0
    assert config_summary(None)["policy"] == "devshare"
