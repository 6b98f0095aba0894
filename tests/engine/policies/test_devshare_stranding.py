"""Free cards stranded next to too little CPU or memory, by the per-card needs of the GPU pods seen."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.policies.devshare import TOP, Stranding
from devshare.sim.replay import pod_request
from devshare.sim.trace import TracePod

GIB = 1 << 30


def _learned(pods: list[TracePod]) -> Stranding:
    s = Stranding()
    for p in pods:
        s.observe(pod_request(p), p.num_gpu, p.gpu_milli)
    s.rebuild()
    return s


def _stranded(s: Stranding, n: float, cpu: float, mem_gib: float) -> float:
    return float(s.stranded(np.array([n]), np.array([cpu]), np.array([mem_gib * GIB]))[0])


def test_nothing_seen_strands_nothing() -> None:
    s = _learned([TracePod("cpu-only", 8000, 1024, 0, 0)])
    assert _stranded(s, 8, 0, 0) == 0.0


def test_a_card_without_cpu_or_memory_beside_it_is_stranded() -> None:
    s = _learned([TracePod("p", 8000, 32 * 1024, 1, 1000)])  # one-GPU pods of 8 cores and 32 GiB
    assert _stranded(s, 1, 8000, 32) == 0.0
    assert _stranded(s, 1, 0, 32) == 1000.0  # no CPU left: the card stays empty
    assert _stranded(s, 2, 8000, 32) == 1000.0  # room for one such pod, not two
    assert np.isclose(_stranded(s, 4, 64000, 3), 4000 - 1000 * 3 / 32)  # plenty of CPU, 3 GiB of memory
    # (counted in fractions of a pod: 3 GiB is 3/32 of one, so a little less than all four cards)
    assert np.isclose(_stranded(s, 1, 4000, 64), 500.0)  # half a pod's CPU: half the card, on average


def test_shares_need_their_cpu_per_card() -> None:
    # two 470 shares fill a card: a card needs 1000/470 times a 470 pod's CPU beside it
    s = _learned([TracePod("p", 8000, 0, 1, 470)])
    assert np.isclose(s.cpu[0], 8000 * 1000 / 470)
    # a pod of 4 whole cards needs a quarter of its CPU per card
    s = _learned([TracePod("p", 32000, 0, 4, 1000)])
    assert np.isclose(s.cpu[0], 8000)


def test_needs_are_weighed_by_the_gpu_they_ask_and_the_heaviest_kept() -> None:
    pods = [TracePod(f"p{i}", 1000 * (i + 1), 0, 1, 1000) for i in range(TOP + 5)]
    pods += [TracePod("big", 500, 0, 8, 1000)]  # eight cards: the heaviest need
    s = _learned(pods)
    assert len(s.weight) == TOP and np.isclose(s.weight.sum(), 1.0)
    assert np.isclose(s.weight.max(), 8 / (TOP - 1 + 8))  # the eight-card pod and TOP - 1 one-card ones


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 32000), st.integers(0, 128), st.sampled_from([1, 2, 4, 8]),
                          st.sampled_from([100, 470, 810, 1000])), min_size=1, max_size=30),
       st.integers(0, 8), st.integers(0, 128000), st.integers(0, 512), st.integers(0, 8000), st.integers(0, 64))
def test_stranded_is_monotone(pods: list, n: int, cpu: int, mem: int, more_cpu: int, more_mem: int) -> None:
    """Between none and all of the free cards; more CPU or memory strands no more, more free cards no less."""
    s = _learned([TracePod(f"p{i}", c, m * 1024, k, g if k == 1 else 1000) for i, (c, m, k, g) in enumerate(pods)])
    x = _stranded(s, n, cpu, mem)
    assert -1e-9 <= x <= 1000 * n + 1e-9
    assert _stranded(s, n, cpu + more_cpu, mem + more_mem) <= x + 1e-9
    assert _stranded(s, n + 1, cpu, mem) >= x - 1e-9
    c, m = np.array([cpu], float), np.array([mem * GIB], float)
    assert np.isclose(float(s.stranded(np.array([n], float), c, m, s.fill(c, m))[0]), x)  # the fill given
