"""The simulate plot (issue 40): one panel, full axes, the table's words, the optimum and the floor marked."""

from __future__ import annotations

from typing import Any

from devshare.sim.report import figure


def run(policy: str, unallocated: float) -> dict[str, Any]:
    curve = [min(float(x), 100.0 - unallocated if x >= 95 else float(x)) for x in range(131)]
    return {"policy": policy, "allocated_pct": {"42": curve, "43": curve},
            "unallocated_pct_at_100": {"mean": unallocated, "median": unallocated}}


def test_one_panel_on_full_axes_with_the_optimum_and_the_floor() -> None:
    with_offline = {**run("devshare", 3.84),
                    "optimum_allocated_pct": {"42": {"95": 95.0, "100": 96.9, "130": 99.5}},
                    "optimum_unallocated_pct_at_100": {"mean": 3.1},
                    "floor_unallocated_pct_at_100": {"mean": 3.61}}
    fig = figure([with_offline, run("fgd", 4.73)], title="t")
    (main,) = fig.axes  # one panel (the lower "100 minus the upper" panel is gone), with its zoom inset
    (inset,) = main.child_axes
    assert inset.get_position().width < main.get_position().width
    assert main.get_ylim()[0] == 0 and main.get_xlim() == (0, 130)  # no axis starting at 84
    assert inset.get_xlim()[0] == 85
    labels = [t.get_text() for t in main.get_legend().get_texts()]
    assert "devshare: 3.84% unallocated at 100% arrival" in labels
    assert "fgd: 4.73% unallocated at 100% arrival" in labels
    assert any(lab.startswith("offline optimum") and "3.10% unallocated" in lab for lab in labels)
    assert any(lab.startswith("floor") and "3.61% unallocated" in lab for lab in labels)
    assert not any("unused" in lab for lab in labels)  # the table's word
    assert "allocated" in main.get_ylabel() and "arrived workload" in main.get_xlabel()
    floor_marks = [ln for ln in main.get_lines() if ln.get_marker() == "x"]
    assert [tuple(ln.get_xydata()[0]) for ln in floor_marks] == [(100.0, 100.0 - 3.61)]
