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
