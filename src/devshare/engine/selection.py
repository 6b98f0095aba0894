"""Which GPUs a pod may take by its selection annotations (HAMi's ``nvidia.com/use-gpuuuid``,
``nouse-gpuuuid``, ``use-gputype``, ``nouse-gputype``; :class:`~devshare.model.request.GpuSelection`).

The selection is one more per-card rule of :mod:`devshare.engine.admit` (``EXCLUDED``): the filter's
card mask takes it through the usable mask it starts from (:func:`allowed`), reserve's check through
:func:`excluded_cards`. A card's type is its model as the Device object gives it, else the node's
``devshare.io/gpu-model`` label.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from devshare.engine.state import ClusterState
from devshare.engine.table import DeviceTable
from devshare.model.request import GpuSelection

Mask = npt.NDArray[np.bool_]


def card_model(state: ClusterState, table: DeviceTable, row: int, col: int) -> str:
    return state.card_model(table, row, col)


def _allowed(state: ClusterState, table: DeviceTable, sel: GpuSelection) -> Mask:
    out = np.zeros(table.present.shape, np.bool_)
    for row in state.row_of.values():
        ids = table.ids[row] if row < len(table.ids) else []
        for col, device_id in enumerate(ids):
            out[row, col] = sel.allows(device_id, card_model(state, table, row, col))
    return out


def allowed(state: ClusterState, table: DeviceTable, sel: GpuSelection) -> Mask:
    """``[table rows, width]``: the cards ``sel`` lets the pod take (made once per layout and selection)."""
    mask: Mask = state.caches.per_layout(("gpu selection", table.type, sel), lambda: _allowed(state, table, sel))
    return mask


def excluded_cards(state: ClusterState, table: DeviceTable, row: int, sel: GpuSelection | None) -> list[bool]:
    """Per card of ``row`` (in column order), whether ``sel`` leaves it out."""
    n = table.count(row)
    if sel is None:
        return [False] * n
    return [not sel.allows(table.ids[row][c], card_model(state, table, row, c)) for c in range(n)]


def why_excluded(state: ClusterState, table: DeviceTable, row: int, sel: GpuSelection) -> list[str]:
    """``gpu 1 (GPU-...): not one of its nvidia.com/use-gpuuuid`` for each card ``sel`` leaves out."""
    out = []
    for c in range(table.count(row)):
        why = sel.why_not(table.ids[row][c], card_model(state, table, row, c))
        if why:
            out.append(f"{table.type} {int(table.minor[row, c])} ({table.ids[row][c]}) is {why}")
    return out
