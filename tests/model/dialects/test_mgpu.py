"""mGPU (seed 000): every example pod of its webhook section, and the rules one by one."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model import names
from devshare.model.dialects import mgpu
from devshare.model.errors import InvalidRequest
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.quantity import MIB
from devshare.model.request import DeviceRequest

CORE, MEM, MULTI = mgpu.MGPU_CORE, mgpu.MGPU_MEMORY, mgpu.MGPU_MULTIPLE


def pod(*resources: dict[str, Any], annotations: dict[str, str] | None = None, both: bool = False) -> dict[str, Any]:
    """A pod with one container per ``resources`` (as requests; ``both``: as limits too)."""
    containers = []
    for i, r in enumerate(resources):
        res: dict[str, Any] = {"requests": dict(r)}
        if both:
            res["limits"] = dict(r)
        containers.append({"name": f"c{i}", "image": "cuda", "resources": res})
    meta: dict[str, Any] = {"name": "mgpu-pod", "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}}


def share(count: int, core_pct: int, mib: int) -> DeviceRequest:
    return DeviceRequest(type="gpu", count=count, core_milli=core_pct * 10, memory=mib * MIB)


def whole(count: int) -> DeviceRequest:
    return DeviceRequest(type="gpu", count=count, core_milli=1000, memory_ratio_milli=1000)


def only_problem(p: dict[str, Any], *needles: str) -> str:
    problems = validate_pod(p)
    assert len(problems) == 1, problems
    for n in needles:
        assert n in problems[0], (n, problems[0])
    with pytest.raises(InvalidRequest):
        parse_pod(p)
    return problems[0]


# --- normal mGPU pods (seed 000, webhook section)


def test_rule_1_core_not_positive() -> None:
    msg = only_problem(pod({CORE: "-20", MEM: "6k"}), "container 'c0'", CORE, "-20", "above 0")
    assert msg.startswith("container 'c0': ")


def test_rule_1_memory_not_positive() -> None:
    only_problem(pod({CORE: "50", MEM: "0"}), MEM, "above 0")


def test_rule_2_memory_below_minimum() -> None:
    # the seed's example pod (core 120, memory 128): too little memory, and 120 is not whole cards
    problems = validate_pod(pod({CORE: "120", MEM: "128"}))
    assert any("256 MiB" in p and "128" in p for p in problems), problems
    assert any("multiple of 100" in p for p in problems), problems
    assert len(problems) == 2
    # the rule as stated: core in (0, 100) with memory below 256 MiB
    only_problem(pod({CORE: "50", MEM: "128"}), "below the minimum of 256 MiB", "ask at least 256")
    only_problem(pod({CORE: "50"}), MEM, "not set", "256")


def test_rule_3_core_above_100_not_whole_cards() -> None:
    only_problem(pod({CORE: "120"}), "120", "multiple of 100", "write 100 or 200")


def test_rule_4_redundant_memory_on_whole_cards() -> None:
    only_problem(pod({CORE: "200", MEM: "6k"}), "2 whole card(s)", f"remove {MEM}")
    only_problem(pod({CORE: "100", MEM: "6k"}), "1 whole card(s)", f"remove {MEM}")


def test_memory_without_core() -> None:
    only_problem(pod({MEM: "6k"}), f"add {CORE}")


def test_normal_requests() -> None:
    assert parse_pod(pod({CORE: "30", MEM: "6k"})).containers[0].devices == (share(1, 30, 6000),)
    assert parse_pod(pod({CORE: "99", MEM: "256"})).containers[0].devices == (share(1, 99, 256),)
    assert parse_pod(pod({CORE: "100"})).containers[0].devices == (whole(1),)
    assert parse_pod(pod({CORE: "200"})).containers[0].devices == (whole(2),)
    req = parse_pod(pod({CORE: "30", MEM: "6k"}, both=True))
    assert req.dialect == "mgpu"
    assert req.containers[0].devices == (share(1, 30, 6000),)


def test_six_k_is_six_thousand_mib() -> None:
    (d,) = parse_pod(pod({CORE: "50", MEM: "6k"})).containers[0].devices
    assert d.memory == 6000 * MIB


# --- multiple mGPU pods: vke.volcengine.com/container-multiple-gpu


def test_multiple_rule_1_count_per_container() -> None:
    p = pod({CORE: "200", MEM: "6k"}, annotations={MULTI: "3,2"}, both=True)
    only_problem(p, "lists 2 card count(s)", "1 container(s)", "one count per container")


def test_multiple_rule_2_invalid_count() -> None:
    p = pod({CORE: "200", MEM: "6k"}, annotations={MULTI: "-1,2"}, both=True)
    problems = validate_pod(p)
    assert any("-1" in m and "1 or more" in m for m in problems), problems
    only_problem(pod({CORE: "50", MEM: "6k"}, annotations={MULTI: "x"}), "not a whole number")
    only_problem(pod({CORE: "50", MEM: "6k"}, annotations={MULTI: "0"}), "0 cards", "1 or more")


def test_multiple_rule_3_redundant_memory() -> None:
    p = pod({CORE: "200", MEM: "6k"}, annotations={MULTI: "2"}, both=True)
    only_problem(p, "100% of each card", f"remove {MEM}")


def test_multiple_rule_4_divisible() -> None:
    p = pod({CORE: "130", MEM: "6k"}, annotations={MULTI: "3"}, both=True)
    only_problem(p, "130", "does not divide evenly over 3 cards", "multiple of 3")
    only_problem(pod({CORE: "100", MEM: "6001"}, annotations={MULTI: "2"}), "6001 MiB", "does not divide evenly")


def test_multiple_rule_4_min_memory_per_card() -> None:
    only_problem(pod({CORE: "100", MEM: "500"}, annotations={MULTI: "2"}), "250 MiB per card", "at least 512")


def test_multiple_rule_4_core_per_card_at_most_100() -> None:
    only_problem(pod({CORE: "300", MEM: "6k"}, annotations={MULTI: "2"}), "150% of each card", "more than 100")


def test_seed_example_2_1_3() -> None:
    """Seed 000's "2,1,3": container 0 over two cards at 50%, container 1 one full card, container 2
    over three cards at 33.33%. Its own rule (core divisible by the count) refuses the last one."""
    c0, c1 = {CORE: "100", MEM: "6k"}, {CORE: "100"}
    msg = only_problem(pod(c0, c1, {CORE: "100", MEM: "6k"}, annotations={MULTI: "2,1,3"}), "container 'c2'")
    assert "does not divide evenly over 3 cards" in msg
    # with a divisible core the same pod is accepted
    req = parse_pod(pod(c0, c1, {CORE: "99", MEM: "6k"}, annotations={MULTI: "2,1,3"}))
    assert [c.devices for c in req.containers] == [(share(2, 50, 3000),), (whole(1),), (share(3, 33, 2000),)]
    assert req.multi_card_share()


def test_multiple_whole_cards_and_non_mgpu_container() -> None:
    req = parse_pod(pod({CORE: "200"}, {"cpu": "1"}, annotations={MULTI: "2,0"}))
    assert [c.devices for c in req.containers] == [(whole(2),), ()]


def test_annotation_ignored_without_mgpu_requests() -> None:
    assert validate_pod(pod({"cpu": "1"}, annotations={MULTI: "garbage"})) == []


def test_multi_card_share_needs_native_burst_share() -> None:
    ann = {MULTI: "2", names.COMPUTE_POLICY: "fixed-share"}
    only_problem(pod({CORE: "100", MEM: "6k"}, annotations=ann), "native-burst-share")
    ann[names.COMPUTE_POLICY] = "native-burst-share"
    assert parse_pod(pod({CORE: "100", MEM: "6k"}, annotations=ann)).compute_policy == "native-burst-share"


def test_rule_functions_directly() -> None:
    assert mgpu.positive(-20, 6000) and mgpu.positive(None, None) == []
    assert mgpu.min_memory(50, 128) and mgpu.min_memory(50, 256) is None
    assert mgpu.min_memory(200, None) is None
    assert mgpu.full_cards(120) and mgpu.full_cards(300) is None
    assert mgpu.redundant_memory(200, 6000) and mgpu.redundant_memory(50, 6000) is None
    assert mgpu.count_list("2,1,3", 3) == ([2, 1, 3], [])
    assert mgpu.count_list("3,2", 1)[0] is None
    assert mgpu.multi_core_per_card(130, 1) and mgpu.multi_core_per_card(200, 2) is None
    assert mgpu.multi_divisible(130, 6000, 3) and mgpu.multi_divisible(150, 6000, 3) == []
    assert mgpu.multi_redundant_memory(200, 6000, 2) and not mgpu.multi_redundant_memory(
        200, None, 2
    )
    assert mgpu.multi_min_memory(100, 500, 2) and mgpu.multi_min_memory(100, 512, 2) is None
