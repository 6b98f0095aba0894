"""The cluster-wide device arrays (engine/table.py): a node's devices in its row, the usable mask,
growth that keeps what is there, and usage counted exactly with the free arrays kept in step."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.table import DeviceTable
from devshare.model.device import DeviceInfo

GiB = 2**30


def gpus(n: int, *, memory: int = 16 * GiB, unhealthy: tuple[int, ...] = (), minors: list[int] | None = None,
         model: str = "A100") -> tuple[DeviceInfo, ...]:
    minors = minors if minors is not None else list(range(n))
    return tuple(DeviceInfo(type="gpu", minor=m, id=f"GPU-{m}", memory=memory, health=m not in unhealthy,
                            model=model) for m in minors)


def test_set_devices_describes_the_row_in_order() -> None:
    t = DeviceTable("gpu", rows=2, width=4)
    t.set_devices(1, gpus(3, unhealthy=(4,), minors=[0, 4, 7]), blocked_ids=("GPU-7", "GPU-9"))
    assert t.minor[1].tolist() == [0, 4, 7, -1]
    assert t.present[1].tolist() == [True, True, True, False]
    assert t.healthy[1].tolist() == [True, False, True, False]
    assert t.blocked[1].tolist() == [False, False, True, False]
    assert t.usable()[1].tolist() == [True, False, False, False]
    assert t.total_core[1].tolist() == [1000, 1000, 1000, 0]
    assert t.free_mem[1].tolist() == [16 * GiB] * 3 + [0]
    assert t.open_core[1].tolist() == [1000, 0, 0, 0]  # only usable cards are open
    assert t.inv_core[1].tolist() == [1 / 1000] * 3 + [0.0]
    assert t.inv_mem[1, 0] == 1 / (16 * GiB) and t.inv_mem[1, 3] == 0.0
    assert t.ids[1] == ["GPU-0", "GPU-4", "GPU-7"] and t.models[1] == ["A100"] * 3
    assert t.count(1) == 3 and t.count(0) == 0
    assert (t.column_of(1, 4), t.column_of(1, 7), t.column_of(1, 5), t.column_of(0, 0)) == (1, 2, -1, -1)


def test_a_device_without_memory_scores_no_memory() -> None:
    t = DeviceTable("rdma", rows=1, width=2)
    t.set_devices(0, (DeviceInfo(type="rdma", minor=0, id="r0"),))
    assert t.total_mem[0, 0] == 0 and t.inv_mem[0, 0] == 0.0 and t.inv_core[0, 0] == 1 / 1000


def test_a_device_without_an_id_is_never_blocked() -> None:
    t = DeviceTable("gpu", rows=1, width=2)
    t.set_devices(0, (DeviceInfo(type="gpu", minor=0),), blocked_ids=("",))
    assert not t.blocked[0, 0] and t.usable()[0, 0]


def test_rows_and_width_grow_and_keep_what_is_there() -> None:
    t = DeviceTable("gpu", rows=2, width=2)
    t.set_devices(0, gpus(2))
    t.add_usage(0, 1, 300, GiB, +1)
    t.set_devices(5, gpus(4))  # beyond the rows and wider than the table
    assert t.rows >= 6 and t.width == 4 and len(t.ids) == t.rows and len(t.models) == t.rows
    assert t.minor[0].tolist() == [0, 1, -1, -1]  # new columns of old rows: no device
    assert t.used_core[0].tolist() == [0, 300, 0, 0] and t.free_core[0].tolist() == [1000, 700, 0, 0]
    assert t.usable()[0].tolist() == [True, True, False, False]
    assert t.minor[3].tolist() == [-1] * 4 and t.ids[3] == []
    t.ensure_rows(7)
    assert t.rows == 12  # doubled: growing one row at a time would copy every array each time
    t.ensure_rows(3)
    assert t.rows == 12


def test_describing_a_row_again_resets_its_usage_and_clear_empties_it() -> None:
    t = DeviceTable("gpu", rows=1, width=2)
    t.set_devices(0, gpus(2))
    t.add_usage(0, 0, 500, GiB, +1, slots=2)
    t.set_devices(0, gpus(2, memory=8 * GiB))
    assert t.used_core[0].tolist() == [0, 0] and t.used_slots[0].tolist() == [0, 0]
    assert t.free_mem[0].tolist() == [8 * GiB, 8 * GiB]
    t.clear(0)
    for name in ("total_core", "total_mem", "free_core", "free_mem", "open_core", "used_core"):
        assert getattr(t, name)[0].tolist() == [0, 0], name
    assert not t.present[0].any() and not t.usable()[0].any() and t.minor[0].tolist() == [-1, -1]
    assert t.ids[0] == [] and t.count(0) == 0


usage = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 800), st.integers(0, 9 * GiB),
                           st.integers(1, 3)), max_size=30)


@settings(max_examples=80, deadline=None)
@given(usage, st.sets(st.integers(0, 3), max_size=2))
def test_usage_is_counted_exactly_and_the_free_arrays_stay_in_step(steps: list, unhealthy: set[int]) -> None:
    t = DeviceTable("gpu", rows=1, width=2)
    for row in range(3):
        t.set_devices(row, gpus(4, unhealthy=tuple(unhealthy)))
    start = {n: getattr(t, n).copy() for n in ("used_core", "used_mem", "used_slots", "free_core", "free_mem",
                                               "open_core")}
    for row, col, core, mem, slots in steps:
        t.add_usage(row, col, core, mem, +1, slots)
        # never clipped: an over-booked card shows negative free, so taking pods off restores it exactly
        assert (t.free_core == t.total_core - t.used_core).all()
        assert (t.free_mem == t.total_mem - t.used_mem).all()
        assert (t.open_core == np.where(t.usable() & (t.free_core > 0), t.free_core, 0)).all()
    for row, col, core, mem, slots in reversed(steps):
        t.add_usage(row, col, core, mem, -1, slots)
    for name, before in start.items():
        assert (getattr(t, name) == before).all(), name
