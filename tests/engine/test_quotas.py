"""Per-namespace GPU quotas: compute and memory summed across dialects (a ratio counted as the bytes it
becomes on the card it takes, a whole card as all of its memory), enforced when the pod is judged, with
the reason; what a namespace holds follows every assume, bind and release."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.quotas import Ask, Quota, Quotas
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.pod import parse_pod
from devshare.model.request import DeviceRequest
from support.cluster import GiB, add_node, gpu, outcome, pod, whole


def pod_of(name: str, limits: dict[str, str], ns: str = "team-a", annotations: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return parse_pod({"metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
                      "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}})


def scheduler(quota: Quota, *, memory: int = 16 * GiB, gpus: int | list[int] = 4) -> Scheduler:
    state = ClusterState()
    add_node(state, "n", gpus=gpus, memory=memory)
    return Scheduler(state, quotas=Quotas({"team-a": quota}))


def test_core_is_summed_across_dialects_with_the_reason() -> None:
    s = scheduler(Quota(core_milli=2000))
    life = Lifecycle(s)
    for p in (pod_of("koord", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}),
              pod_of("mgpu", {"vke.volcengine.com/mgpu-core": "30", "vke.volcengine.com/mgpu-memory": "1024"}),
              pod_of("whole", {"nvidia.com/gpu": "1"})):
        assert life.schedule(p, now=0) is not None, p.name
    assert s.state.namespace_gpu["team-a"][0] == 1800
    over = pod_of("more", {"koordinator.sh/gpu": "30"})
    out = outcome(s, over)
    assert out.passed == [] and out.unresolvable == {"n": "namespace team-a: gpu core quota 200% used 180%, asks 30%"}
    assert "namespace team-a: gpu core quota" in s.why_unschedulable(over)
    # other namespaces are not limited, and a freed share makes room
    assert outcome(s, pod_of("other", {"koordinator.sh/gpu": "30"}, ns="team-b")).passed == ["n"]
    life.release("team-a/mgpu")
    assert outcome(s, over).passed == ["n"]


def test_memory_counts_ratios_and_whole_cards_as_bytes_of_the_card() -> None:
    s = scheduler(Quota(memory=20 * GiB), memory=16 * GiB)
    life = Lifecycle(s)
    assert life.schedule(pod_of("half", {"koordinator.sh/gpu": "50"}), now=0) is not None  # 8 GiB of a 16 GiB card
    assert s.state.namespace_gpu["team-a"][1] == 8 * GiB
    assert life.schedule(pod_of("aliyun", {"aliyun.com/gpu-mem": "4096"}), now=0) is not None  # 4 GiB
    whole_card = pod_of("whole", {"nvidia.com/gpu": "1"})
    assert outcome(s, whole_card).unresolvable["n"] == (
        "namespace team-a: gpu memory quota 20 GiB used 12 GiB, asks 16 GiB (100% of a card's memory on this "
        "node's cards)")
    assert outcome(s, pod_of("bytes", {"aliyun.com/gpu-mem": "9216"})).unresolvable["n"] == (
        "namespace team-a: gpu memory quota 20 GiB used 12 GiB, asks 9 GiB")
    assert outcome(s, pod_of("ratio", {"koordinator.sh/gpu": "50"})).passed == ["n"]  # 8 GiB: just fits


def test_cards_of_several_sizes_are_judged_by_the_card_taken() -> None:
    # a 8 GiB card and a 32 GiB one: 50% is 4 or 16 GiB; the node passes when its allocation fits
    s = scheduler(Quota(memory=10 * GiB), gpus=[8 * GiB, 32 * GiB])
    placed = s.place(pod_of("p", {"koordinator.sh/gpu": "50"}))
    assert placed is not None and placed.allocation.containers[0].devices[0].memory == 4 * GiB
    s2 = scheduler(Quota(memory=2 * GiB), gpus=[8 * GiB, 32 * GiB])
    assert "asks 4 GiB" in outcome(s2, pod_of("p", {"koordinator.sh/gpu": "50"})).unresolvable["n"]


def test_bind_is_judged_afresh() -> None:
    """A filter's answer is not reused at bind for a pod under a quota: another pod of the namespace may
    have taken the room in between, on another node."""
    state = ClusterState()
    add_node(state, "a", gpus=1)
    add_node(state, "b", gpus=1)
    s = Scheduler(state, quotas=Quotas({"team-a": Quota(core_milli=500)}))
    first, second = pod("x", gpu(50, GiB), ns="team-a"), pod("y", gpu(50, GiB), ns="team-a")
    filtered = s.evaluate(second, state.node_rows(["b"]))
    placed = s.place(first, ["a"])
    assert placed is not None
    Lifecycle(s).assume(first, placed.allocation, now=0)
    assert s.allocate_on(second, "b", evaluated=filtered) == "namespace team-a: gpu core quota 50% used 50%, asks 50%"


def test_the_ask() -> None:
    assert Ask.of(pod("p", [gpu(30, 2 * GiB), whole(2)], DeviceRequest(type="rdma", core_milli=500))) == Ask(
        core_milli=2300, memory=2 * GiB, card_milli=2000)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["team-a", "team-b"]), st.sampled_from([100, 250, 500, 1000]),
                          st.booleans()), max_size=12))
def test_what_a_namespace_holds_is_the_sum_of_its_records(steps: list[tuple[str, int, bool]]) -> None:
    state = ClusterState()
    add_node(state, "n", gpus=4)
    s = Scheduler(state)
    life = Lifecycle(s)
    for k, (ns, milli, bind) in enumerate(steps):
        p = pod(f"p{k}", gpu(milli / 10, GiB), ns=ns)
        placed = s.place(p)
        if placed is not None:
            life.assume(p, placed.allocation, now=0)
            if bind:
                life.confirm(p, placed.allocation)
        if k % 3 == 2 and state.pods:
            life.release(next(iter(state.pods)))
        want: dict[str, list[int]] = {}
        for rec in state.pods.values():
            acc = want.setdefault(rec.pod.namespace, [0, 0])
            for _, g in rec.allocation.grants():
                acc[0] += g.core_milli
                acc[1] += g.memory
        assert state.namespace_gpu == {ns: v for ns, v in want.items() if v != [0, 0]}
