"""The array kernels of the hot path give exactly the answers of their plain numpy definitions, for every
shape, dtype and memory layout."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from devshare.engine.fit import any_per_row, sum_per_row

shapes = st.tuples(st.integers(0, 40) | st.integers(250, 300), st.integers(0, 12))  # below and above FEW
arrays = st.one_of(
    hnp.arrays(np.bool_, shapes),
    hnp.arrays(np.int64, shapes, elements=st.integers(-(2**40), 2**40)),
    hnp.arrays(np.int8, shapes),
)


@given(arrays, st.booleans())
def test_match_numpy(a: np.ndarray, strided: bool) -> None:
    if strided and a.shape[1] > 1:
        a = a[:, ::2]  # not contiguous
    assert sum_per_row(a).tolist() == a.sum(axis=1, dtype=np.int64).tolist()
    assert sum_per_row(a).dtype == np.int64
    if a.dtype == np.bool_:
        assert any_per_row(a).tolist() == a.any(axis=1).tolist()


@given(hnp.arrays(np.bool_, st.tuples(st.integers(0, 40), st.just(8))))
def test_eight_wide_masks_use_the_word_path_and_match(m: np.ndarray) -> None:
    m = np.ascontiguousarray(m)
    assert any_per_row(m).tolist() == m.any(axis=1).tolist()
    assert sum_per_row(m).tolist() == m.sum(axis=1).tolist()


def _first_of_kind_cube(free: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """The definition, as a [rows, W, W] cube: a fitting card is dropped when a lower fitting card
    of its node has the same free share."""
    w = fits.shape[1]
    f = free[:, :w]
    same = (f[:, :, None] == f[:, None, :]) & fits[:, None, :]
    earlier = np.tril(np.ones((w, w), np.bool_), k=-1)
    return np.asarray(fits & ~(same & earlier[None, :, :]).any(axis=2))


@given(st.integers(0, 30).flatmap(lambda n: st.integers(1, 9).flatmap(lambda w: st.tuples(
    hnp.arrays(np.int64, (n, w + 1), elements=st.sampled_from([0, 100, 250, 500, 1000])),
    hnp.arrays(np.bool_, (n, w))))))
def test_first_of_kind_matches_its_definition(arrays: tuple[np.ndarray, np.ndarray]) -> None:
    from devshare.engine.policies.fgd import first_of_kind, first_of_kind_by_columns

    free, fits = arrays
    want = _first_of_kind_cube(free, fits).tolist()
    assert first_of_kind(free, fits).tolist() == want
    assert first_of_kind_by_columns(free, fits).tolist() == want
