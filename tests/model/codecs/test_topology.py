"""``topology.scheduling.koordinator.sh/gpu`` (seed 003): the seed's example, round trips, malformed values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model import names
from devshare.model.codecs import decode_topology, encode_topology
from devshare.model.errors import InvalidAnnotation


def test_topology_seed_example() -> None:
    text = '{"allocatedGPUs":{"0":["4","5"]},"visibleGPUs":["4","5","6","7"]}'
    assert decode_topology({names.TOPOLOGY_GPU: text}) == ({0: [4, 5]}, [4, 5, 6, 7])
    assert encode_topology({0: [4, 5]}, [4, 5, 6, 7]) == {names.TOPOLOGY_GPU: text}
    assert decode_topology({}) is None


@given(
    st.dictionaries(st.integers(0, 8), st.lists(st.integers(0, 15), max_size=4), max_size=4),
    st.lists(st.integers(0, 15), max_size=8),
)
def test_topology_round_trip(allocated: dict[int, list[int]], visible: list[int]) -> None:
    assert decode_topology(encode_topology(allocated, visible)) == (allocated, visible)


@pytest.mark.parametrize(
    "text", ["x", "[]", '{"allocatedGPUs": []}', '{"allocatedGPUs": {"a": ["1"]}}', '{"visibleGPUs": ["-1"]}']
)
def test_topology_malformed(text: str) -> None:
    with pytest.raises(InvalidAnnotation):
        decode_topology({names.TOPOLOGY_GPU: text})
