"""Which container of which pod a kubelet Allocate call is for (:mod:`devshare.agent.matching`), on pods
as the API serves them. The Allocator's use of it (trades, checkpoints) is ``deviceplugin/test_allocator.py``'s."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.agent.matching import (
    ASSIGNED,
    AllocateError,
    PendingPod,
    Served,
    complete,
    identical,
    match,
    next_container,
    pending_pod,
)
from devshare.model import names
from devshare.model.dialects.nvidia import NVIDIA_GPU
from support.agent import gpu, pod

GPU = NVIDIA_GPU
RESOURCES = (GPU,)


def pending(obj: dict[str, Any], **kw: Any) -> PendingPod:
    p = pending_pod(obj, node="n1", resources=RESOURCES, **kw)
    assert p is not None
    return p


def one_gpu(name: str, *, scheduled: str = "", namespace: str = "default", **kw: Any) -> PendingPod:
    obj = pod(name, "n1", [("main", {GPU: 1}, [gpu(0, "GPU-0")])], namespace=namespace, **kw)
    if scheduled:
        obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    return pending(obj)


def test_a_pending_pod_lists_init_containers_first_with_what_each_asks() -> None:
    obj = pod("p", "n1", [("a", {GPU: 2}, [gpu(0, "G0"), gpu(1, "G1")]), ("b", {"cpu": 1}, [])],
              init=[("setup", {GPU: 1}, [gpu(0, "G0")])])
    p = pending(obj)
    assert [(c.name, c.init, c.amounts) for c in p.containers] == [
        ("setup", True, {GPU: 1}), ("a", False, {GPU: 2}), ("b", False, {})]
    assert p.app_containers == ("a", "b")
    assert (p.key, p.uid, p.allocation.node) == ("default/p", "uid-p", "n1")


def test_amounts_come_from_limits_else_requests_and_bad_or_zero_asks_count_as_none() -> None:
    obj = pod("p", "n1", [("a", {}, [gpu(0, "G0")])])
    c = obj["spec"]["containers"][0]
    c["resources"] = {"requests": {GPU: "3"}}
    assert pending(obj).containers[0].amounts == {GPU: 3}
    c["resources"] = {"limits": {GPU: "2"}, "requests": {GPU: "3"}}
    assert pending(obj).containers[0].amounts == {GPU: 2}
    for bad in ("0", "lots"):
        c["resources"] = {"limits": {GPU: bad}}
        assert pending(obj).containers[0].amounts == {}


@pytest.mark.parametrize("change", ["other node", "deleted", "running", "assigned", "no allocation",
                                    "bad allocation", "allocated elsewhere"])
def test_pods_that_cannot_be_the_subject_of_a_call_are_not_candidates(change: str) -> None:
    obj = pod("p", "n1", [("a", {GPU: 1}, [gpu(0, "G0")])])
    meta = obj["metadata"]
    if change == "other node":
        obj["spec"]["nodeName"] = "n2"
    elif change == "deleted":
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elif change == "running":
        obj["status"]["phase"] = "Running"
    elif change == "assigned":
        meta["annotations"][ASSIGNED] = "true"
    elif change == "no allocation":
        del meta["annotations"][names.ALLOCATION]
    elif change == "bad allocation":
        meta["annotations"][names.ALLOCATION] = "{not json"
    else:
        obj["spec"]["nodeName"] = "n2"  # bound to n2 but allocated on n1
    assert pending_pod(obj, node=obj["spec"]["nodeName"] if change == "allocated elsewhere" else "n1",
                       resources=RESOURCES) is None
    if change in ("running", "assigned"):  # a pod already started is still found when asked for any phase
        assert pending_pod(obj, node="n1", resources=RESOURCES, any_phase=True) is not None


def test_the_order_is_when_the_pod_was_bound_else_created() -> None:
    obj = pod("p", "n1", [("a", {GPU: 1}, [gpu(0, "G0")])])
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    assert pending(obj).order == ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "default/p")
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                    "lastTransitionTime": "2026-01-02T00:00:00Z"}]
    assert pending(obj).order[0] == "2026-01-02T00:00:00Z"


def test_containers_are_served_in_order_and_a_pod_is_complete_once_all_are() -> None:
    obj = pod("p", "n1", [("a", {GPU: 1}, [gpu(0, "G0")]), ("b", {GPU: 1}, [gpu(1, "G1")])],
              init=[("i", {GPU: 1}, [gpu(0, "G0")])])
    p = pending(obj)
    served: Served = set()
    order = []
    while (c := next_container(p, GPU, served)) is not None:
        assert not complete(p, served, RESOURCES)
        order.append(c.name)
        served.add((p.uid, c.name, GPU))
    assert order == ["i", "a", "b"]
    assert complete(p, served, RESOURCES)
    assert complete(p, set(), ("example.com/other",))  # nothing asked of that resource


def test_the_call_goes_to_the_one_container_asking_that_count() -> None:
    two = pending(pod("two", "n1", [("m", {GPU: 2}, [gpu(0, "G0"), gpu(1, "G1")])]))
    one = one_gpu("one")
    m = match(GPU, 1, [two, one], set())
    assert (m.pod.name, m.container, m.standin) == ("one", "main", False)
    assert match(GPU, 2, [two, one], set()).pod.name == "two"


def test_no_match_says_what_each_pending_pod_waits_for_and_how_to_fix_it() -> None:
    with pytest.raises(AllocateError) as e:
        match(GPU, 3, [one_gpu("a")], set())
    assert str(e.value).startswith(f"no pod on this node waits for 3 {GPU}: default/a/main asks 1.")
    assert "devshare.io/allocation annotation" in str(e.value)
    with pytest.raises(AllocateError, match="no pending pod with a devshare allocation asks for it"):
        match(GPU, 1, [], set())


def test_several_different_candidates_are_refused_by_name_unless_kubelet_is_in_one() -> None:
    a, b = one_gpu("a"), one_gpu("b", namespace="other")
    with pytest.raises(AllocateError) as e:
        match(GPU, 1, [a, b], set(), standins=True)  # different namespaces: never stand-ins
    assert "ambiguous Allocate of 1" in str(e.value) and "default/a/main, other/b/main" in str(e.value)
    assert match(GPU, 1, [a, b], set(), started=["uid-b"]).pod.name == "b"


def test_identical_pods_are_served_by_the_first_bound_as_a_stand_in() -> None:
    late = one_gpu("late", scheduled="2026-01-02T00:00:00Z")
    early = one_gpu("early", scheduled="2026-01-01T00:00:00Z")
    assert identical(late, early)
    m = match(GPU, 1, [late, early], set(), standins=True)
    assert (m.pod.name, m.standin) == ("early", True)
    with pytest.raises(AllocateError, match="ambiguous"):
        match(GPU, 1, [late, early], set())  # stand-ins not allowed


def test_pods_of_a_group_never_stand_in_for_each_other() -> None:
    a = one_gpu("a", annotations={names.GANG_NAME: "g"})
    b = one_gpu("b", annotations={names.GANG_NAME: "g"})
    assert not identical(a, b)
    with pytest.raises(AllocateError, match="ambiguous"):
        match(GPU, 1, [a, b], set(), standins=True)


@settings(deadline=None)  # no test depends on machine speed
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.integers(1, 4))
def test_a_call_is_served_with_a_container_asking_exactly_its_count_or_refused(asks: list[int], count: int) -> None:
    pods = [pending(pod(f"p{i}", "n1", [("m", {GPU: n}, [gpu(k, f"G{k}") for k in range(n)])]))
            for i, n in enumerate(asks)]
    try:
        m = match(GPU, count, pods, set(), standins=True)
    except AllocateError:
        assert count not in asks  # pods asking the same count here are identical: one stands in
        return
    assert m.pod.containers[0].amounts[GPU] == count
    assert m.standin == (asks.count(count) > 1)
    assert m.pod.name == f"p{asks.index(count)}"  # the first bound (same times: by name)
