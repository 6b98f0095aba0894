"""Time topology-aware GPU set selection: ``best_set`` cold and ``TopologySolver.best`` warm.

Usage: python bench/bench_topology.py [--repeat N] [--method auto|enumerate|search]

For each matrix (the 8- and 16-GPU fixtures of shared/topologies, and random ones) and each k,
prints the median and p99 time of one call in milliseconds:

- first: the very first ``best_set`` call for (n, k) with all GPUs free, which also builds the
  static subset index table for (free GPUs, k) (built once per process, then reused);
- all free: ``best_set`` with all GPUs free, table built, median of 9 (the pure solve);
- cold: ``best_set`` with no result memoized, over random free-GPU sets (a new number of free
  GPUs builds its table on first use, which shows in the p99);
- warm: ``TopologySolver.best`` on a mask it has already answered (a dict lookup).

Each cold sample uses a different random free-GPU set (each GPU free with probability 0.85, at
least k free), so the figures cover the masks a scheduler sees rather than one lucky case. Run
with --method search to time the branch-and-bound path that enumeration replaces up to 17 GPUs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from devshare.engine import topology
from devshare.engine.topology import TopologySolver, best_set, mask_of
from devshare.model.links import load_topology_file

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "topologies"


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]


def matrices(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    out: list[tuple[str, np.ndarray]] = []
    for name in ("seed-8gpu-bandwidth", "dgx1-volta", "hgx-8gpu-nvswitch", "synthetic-16gpu-two-planes"):
        path = SHARED / f"{name}.json"
        if path.exists():
            out.append((name, np.array(load_topology_file(path).matrix)))
    for n in (8, 16):
        b = rng.uniform(5, 300, (n, n))
        out.append((f"random-{n}", np.minimum(b, b.T)))
        levels = rng.choice([10.0, 16.0, 25.0, 50.0, 100.0], size=(n, n))  # many ties
        out.append((f"random-{n}-levels", np.minimum(levels, levels.T)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--method", default="auto", choices=["auto", "enumerate", "search"])
    args = parser.parse_args()
    rng = np.random.default_rng(42)
    print(f"method={args.method} repeat={args.repeat} (times in ms)")
    print(f"{'matrix':<28}{'n':>3}{'k':>3}{'first':>8}{'all free':>10}{'cold med':>10}{'cold p99':>10}"
          f"{'warm med':>10}{'warm p99':>10}  exact")
    worst: dict[int, float] = {}
    for name, b in matrices(rng):
        n = b.shape[0]
        for k in range(2, n):
            for cache in (topology._subsets, topology._combinations, topology._popcounts):
                cache.cache_clear()
            # free-GPU sets: all free, then random subsets with at least k free
            sets = [list(range(n))]
            while len(sets) < args.repeat:
                free = [i for i in range(n) if rng.random() < 0.85]
                if len(free) >= k:
                    sets.append(free)
            first = timed(partial(best_set, b, sets[0], k, method=args.method))
            full = [timed(partial(best_set, b, sets[0], k, method=args.method)) for _ in range(9)]
            cold = [timed(partial(best_set, b, s, k, method=args.method)) for s in sets]
            solver = TopologySolver(b)
            masks = [mask_of(s) for s in sets]
            for m in masks:
                solver.best(m, k)
            warm = [timed(partial(solver.best, m, k)) for m in masks]
            exact = all(r is not None and r.exact for r in (solver.best(m, k) for m in masks))
            med = statistics.median(cold)
            worst[n] = max(worst.get(n, 0.0), p99(cold))
            print(f"{name:<28}{n:>3}{k:>3}{first:>8.2f}{statistics.median(full):>10.3f}{med:>10.3f}"
                  f"{p99(cold):>10.3f}"
                  f"{statistics.median(warm):>10.4f}{p99(warm):>10.4f}  {exact}")
    for n, w in sorted(worst.items()):
        print(f"worst cold p99 over all {n}-GPU cases: {w:.2f} ms")


if __name__ == "__main__":
    main()
