"""The GPU handler (engine/handlers/gpu.py): the pod's own rules on a node (GPU models, compute policy,
seed 000's label for one container over several shared cards, the GPU selection) with reasons that say
which label to set, the memory-only policy, and multi-GPU sets chosen by bandwidth."""

from __future__ import annotations

import json

import pytest

from devshare.engine.handlers.base import SUCCESS, UNRESOLVABLE, Context, Evaluation, Settings
from devshare.engine.handlers.gpu import GpuHandler
from devshare.engine.policies.binpack import BinpackPolicy, binpack_for
from devshare.engine.policies.devshare import DevsharePolicy
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.topology import best_set
from devshare.model import names
from devshare.model.request import GpuSelection, PodRequest
from support import REPO
from support.cluster import GiB, add_node, gpu, outcome, pod, whole

SEED = json.loads((REPO / "examples" / "topologies" / "seed-8gpu-bandwidth.json").read_text())


def evaluate(state: ClusterState, p: PodRequest, settings: Settings | None = None) -> Evaluation:
    ctx = Context(state, p, settings or Settings(), BinpackPolicy())
    return GpuHandler().evaluate(ctx, state.node_rows())


def unresolvable(state: ClusterState, ev: Evaluation) -> dict[str, str]:
    return {state.name_of[int(r)]: ev.reason(i) for i, r in enumerate(ev.rows) if ev.codes[i] == UNRESOLVABLE}


def test_compute_policy_and_gpu_model_constraints() -> None:
    st = ClusterState()
    add_node(st, "fixed", 2, labels={names.COMPUTE_POLICY: "fixed-share", names.NODE_GPU_MODEL: "A100"})
    add_node(st, "burst", 2, labels={names.COMPUTE_POLICY: "native-burst-share", names.NODE_GPU_MODEL: "T4"})
    sch = Scheduler(st)
    p = pod("p", gpu(30, GiB), compute_policy="fixed-share")
    assert outcome(sch, p).passed == ["fixed"]
    assert "compute policy" in outcome(sch, p).unresolvable["burst"]
    q = pod("q", gpu(30, GiB), gpu_models=("T4",))
    out = outcome(sch, q)
    assert out.passed == ["burst"] and "A100" in out.unresolvable["fixed"]


def test_topology_picks_the_max_bottleneck_set() -> None:
    m = [
        [750.48, 48.39, 48.33, 96.41, 15.77, 15.52, 96.40, 15.74],
        [48.39, 753.38, 96.46, 48.38, 4.64, 16.93, 16.98, 96.39],
        [48.38, 96.25, 751.92, 96.48, 48.39, 17.57, 17.59, 16.72],
        [96.25, 48.39, 96.43, 750.48, 15.45, 48.39, 15.88, 14.62],
        [5.00, 16.81, 48.38, 15.98, 755.56, 96.39, 48.38, 96.44],
        [15.80, 16.93, 17.50, 48.39, 96.25, 751.92, 96.23, 48.38],
        [96.42, 16.75, 17.47, 15.89, 48.35, 96.28, 754.10, 48.33],
        [15.65, 96.20, 16.77, 15.71, 96.25, 48.38, 48.33, 754.83],
    ]
    st = ClusterState()
    add_node(st, "n1", 8, bandwidth=m)
    placed = Scheduler(st).place(pod("p", whole(4)))
    assert placed is not None
    got = sorted(g.minor for g in placed.allocation.containers[0].devices)
    assert got in ([0, 1, 2, 3], [4, 5, 6, 7])


def test_aliyun_gpu_count_two_is_placed_on_an_ordinary_node() -> None:
    """Seed 002: gpu-mem with gpu-count N is that much memory on each of N cards; seed 000's node label
    for one container over several shared cards is mGPU's rule, not Aliyun's (issue 13)."""
    st = ClusterState()
    add_node(st, "plain", 4)
    p = pod("a", gpu(0, 8 * GiB, count=2), dialect="aliyun")
    placed = Scheduler(st).place(p)
    assert placed is not None
    (c0,) = placed.allocation.containers
    assert len({g.minor for g in c0.devices}) == 2 and all(g.memory == 8 * GiB for g in c0.devices)
    # the same shape asked in mGPU still needs the label
    assert names.MULTI_GPU_SHARE in outcome(Scheduler(st), pod("m", gpu(50, GiB, count=2), dialect="mgpu"),
                                            ["plain"]).unresolvable["plain"]


def test_gpu_model_reason_says_which_label_when_the_node_has_none() -> None:
    state = ClusterState()
    add_node(state, "t4", 2, labels={names.NODE_GPU_MODEL: "T4"})
    add_node(state, "plain", 2)
    add_node(state, "a100", 2, labels={names.NODE_GPU_MODEL: "A100"})
    ev = evaluate(state, pod("p", gpu(30), gpu_models=("A100", "H100")))
    assert unresolvable(state, ev) == {
        "t4": "GPU model T4 is not one of A100, H100",
        "plain": f"GPU model unknown is not one of A100, H100 (label the node {names.NODE_GPU_MODEL})",
    }
    assert ev.codes[state.row_of["a100"]] == SUCCESS


def test_compute_policy_reason_names_the_label() -> None:
    state = ClusterState()
    add_node(state, "plain", 2)
    ev = evaluate(state, pod("p", gpu(30), compute_policy="fixed-share"))
    assert unresolvable(state, ev) == {
        "plain": f"pod asks compute policy fixed-share, node has none (label {names.COMPUTE_POLICY})"}


def test_one_container_over_several_shared_cards_needs_the_label_and_the_burst_policy() -> None:
    state = ClusterState()
    add_node(state, "plain", 4)
    add_node(state, "fixed", 4, labels={names.MULTI_GPU_SHARE: "true", names.COMPUTE_POLICY: "fixed-share"})
    add_node(state, "ok", 4, labels={names.MULTI_GPU_SHARE: "true", names.COMPUTE_POLICY: names.MULTI_SHARE_POLICY})
    ev = evaluate(state, pod("p", gpu(50, GiB, count=2), dialect="mgpu"))
    assert unresolvable(state, ev) == {
        "plain": (f"a container shares several GPUs, which this node does not allow "
                  f"(label {names.MULTI_GPU_SHARE}=true enables it)"),
        "fixed": (f"a container shares several GPUs, which needs compute policy {names.MULTI_SHARE_POLICY}; "
                  "node has fixed-share"),
    }
    # whole cards are not shares: no label needed
    assert evaluate(state, pod("w", whole(2))).codes.tolist() == [SUCCESS] * 3


def test_a_gpu_selection_that_leaves_too_few_gpus_is_unresolvable_and_names_them() -> None:
    state = ClusterState()
    add_node(state, "n0", 2)
    add_node(state, "n1", 3)
    sel = GpuSelection(avoid_ids=("GPU-n0-1", "GPU-n1-0"))
    ev = evaluate(state, pod("p", whole(2), gpu_selection=sel))
    assert unresolvable(state, ev) == {
        "n0": ("the pod's GPU selection (nvidia.com/nouse-gpuuuid: GPU-n0-1,GPU-n1-0) allows 1 of this node's "
               "2 GPU(s), a container asks for 2: gpu 1 (GPU-n0-1) is listed in its nvidia.com/nouse-gpuuuid"),
    }
    ((grant_n1),) = ev.grant(1).values()
    assert [g.minor for g in grant_n1] == [1, 2]  # the left-out card is never granted


def test_memory_only_asks_are_placed_by_card_binpack_and_others_by_the_pod_policy() -> None:
    settings = Settings(core_weight=0.3)
    policy = DevsharePolicy()
    ctx = Context(ClusterState(), pod("p", gpu(0, 4 * GiB)), settings, policy)
    assert GpuHandler().policy_for(ctx, gpu(0, 4 * GiB)) is binpack_for(settings, core_weight=0.3)
    assert GpuHandler().policy_for(ctx, gpu(30, 4 * GiB)) is policy


def test_topology_off_or_no_matrix_keeps_the_policy_s_lowest_cards() -> None:
    state = ClusterState()
    add_node(state, "n1", 8, bandwidth=SEED["bandwidth_gbps"])
    add_node(state, "flat", 8)
    ev = evaluate(state, pod("p", whole(4)), Settings(topology=False))
    assert ev.columns is not None and ev.columns.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    on = evaluate(state, pod("p", whole(4)))
    assert on.columns is not None and on.columns.tolist()[1] == [0, 1, 2, 3]
    # half the policy's score, half the set's bottleneck over the node's best link (no matrix: one half)
    best = best_set(SEED["bandwidth_gbps"], range(8), 4)
    _, ((_, top),) = GpuHandler().row_solvers(state)
    assert best is not None and on.columns.tolist()[0] == list(best.gpus)
    assert on.scores.tolist() == pytest.approx([0.5 * ev.scores[0] + 0.5 * best.bottleneck / top,
                                                0.5 * ev.scores[1] + 0.25])


def test_nodes_with_one_matrix_share_one_solver() -> None:
    state = ClusterState()
    add_node(state, "a", 8, bandwidth=SEED["bandwidth_gbps"])
    add_node(state, "b", 8, bandwidth=SEED["bandwidth_gbps"])
    add_node(state, "flat", 8)
    idx, solvers = GpuHandler().row_solvers(state)
    assert idx[state.row_of["a"]] == idx[state.row_of["b"]] == 0 and idx[state.row_of["flat"]] == -1
    m = SEED["bandwidth_gbps"]
    top = max(min(m[i][j], m[j][i]) for i in range(8) for j in range(8) if i != j)  # the slower direction
    assert len(solvers) == 1 and solvers[0][1] == top
