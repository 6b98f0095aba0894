"""POST /mutate over HTTPS: schedulerName (seed 001's upgrade path) and name normalisation, as an
RFC 6902 patch that applies cleanly and that the validating webhook then accepts."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model.dialects import normalise_resources
from devshare.server.webhook.mutate import mutation
from support.webhook_client import Client, decode_patch
from support.webhook_pods import SEED000_ALLOWED, SEED001_ALLOWED, apply_patch, pod

K, L = "koordinator.sh/", "kubernetes.io/"


def mutated(client: Client, p: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    response = client.review("/mutate", p)
    assert response["allowed"] is True
    return apply_patch(p, decode_patch(response)), response


def test_legacy_names_become_koordinator_names(client: Client) -> None:
    p = pod({L + "gpu-core": "50", L + "gpu-memory": "4Gi", "cpu": "1"}, {L + "rdma": "100", L + "fpga": "50"})
    out, response = mutated(client, p)
    c0, c1 = out["spec"]["containers"]
    for section in ("requests", "limits"):
        assert c0["resources"][section] == {K + "gpu-core": "50", K + "gpu-memory": "4Gi", "cpu": "1"}
        assert c1["resources"][section] == {K + "rdma": "100", K + "fpga": "50"}
    # '/' in a key is escaped as ~1 in the patch paths
    paths = [op["path"] for op in decode_patch(response)]
    assert "/spec/containers/0/resources/requests/kubernetes.io~1gpu-core" in paths
    assert any("koordinator.sh~1gpu-core" in path for path in paths)
    assert any("normalised" in w for w in response["warnings"])


@pytest.mark.parametrize("prefix", [K, L])
def test_gpu_becomes_core_and_ratio(client: Client, prefix: str) -> None:
    out, _ = mutated(client, pod({prefix + "gpu": "50"}))
    assert out["spec"]["containers"][0]["resources"]["requests"] == {
        K + "gpu-core": "50",
        K + "gpu-memory-ratio": "50",
    }
    out, _ = mutated(client, pod({prefix + "gpu": "200"}))
    assert out["spec"]["containers"][0]["resources"]["limits"] == {
        K + "gpu-core": "200",
        K + "gpu-memory-ratio": "200",
    }


def test_a_rename_never_overwrites(client: Client) -> None:
    # both spellings given: left for validation to judge (mutation runs first)
    p = pod({L + "gpu-core": "50", K + "gpu-core": "60", K + "gpu-memory-ratio": "50"})
    out, _ = mutated(client, p)
    assert out["spec"]["containers"][0]["resources"] == p["spec"]["containers"][0]["resources"]
    # gpu next to gpu-core is ambiguous: not split
    p = pod({K + "gpu": "50", K + "gpu-core": "50"})
    out, _ = mutated(client, p)
    assert out["spec"]["containers"][0]["resources"] == p["spec"]["containers"][0]["resources"]


def test_scheduler_name_set_for_device_pods(client: Client) -> None:
    for scheduler in (None, "", "default-scheduler"):
        out, response = mutated(client, pod({"nvidia.com/gpu": "1"}, scheduler=scheduler))
        assert out["spec"]["schedulerName"] == "devshare-scheduler"
        assert any("schedulerName" in w for w in response["warnings"])


def test_scheduler_chosen_on_purpose_is_kept(client: Client) -> None:
    for scheduler in ("volcano", "devshare-scheduler"):
        response = client.review("/mutate", pod({"nvidia.com/gpu": "1"}, scheduler=scheduler))
        assert response == {"uid": response["uid"], "allowed": True}


def test_init_containers_are_normalised_too() -> None:
    p = pod({"cpu": "1"})
    p["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {L + "gpu": "100"}}}]
    ops, _ = mutation(p)
    out = apply_patch(p, ops)
    assert out["spec"]["initContainers"][0]["resources"]["limits"] == {
        K + "gpu-core": "100",
        K + "gpu-memory-ratio": "100",
    }


def test_configurable_scheduler() -> None:
    p = pod({K + "gpu": "50"}, scheduler="custom-default")
    ops, _ = mutation(p, scheduler_name="gpu-sched", replace_schedulers=("custom-default",))
    assert apply_patch(p, ops)["spec"]["schedulerName"] == "gpu-sched"
    ops, _ = mutation(p, scheduler_name="gpu-sched")  # custom-default is not replaceable by default
    assert apply_patch(p, ops)["spec"]["schedulerName"] == "custom-default"


@pytest.mark.parametrize(
    "other",
    [pod({"cpu": "2"}), pod(), pod({"example.com/fpga": "1"}, scheduler="default-scheduler")],
    ids=["cpu", "empty", "other-extended"],
)
def test_other_pods_untouched(client: Client, other: dict[str, Any]) -> None:
    response = client.review("/mutate", other)
    assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("title", "p"),
    [*SEED000_ALLOWED, *SEED001_ALLOWED],
    ids=[c[0] for c in [*SEED000_ALLOWED, *SEED001_ALLOWED]],
)
def test_mutated_pods_still_pass_validation(client: Client, title: str, p: dict[str, Any]) -> None:
    # the API server's order: mutating webhooks, then validating ones, on the mutated pod
    out, _ = mutated(client, p)
    assert client.review("/validate", out)["allowed"] is True
    # and mutating again changes nothing (reinvocationPolicy: IfNeeded)
    assert decode_patch(client.review("/mutate", out)) == []


def test_normalise_resources_does_not_change_its_input() -> None:
    res = {L + "gpu": "50"}
    assert normalise_resources(res) == {K + "gpu-core": "50", K + "gpu-memory-ratio": "50"}
    assert res == {L + "gpu": "50"}
