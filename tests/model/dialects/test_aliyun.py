"""The Aliyun dialect's annotation codec (``ALIYUN_COM_GPU_MEM_*``): round trips and malformed values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model.dialects import aliyun
from devshare.model.dialects.aliyun import AliyunAllocation, decode_aliyun, encode_aliyun
from devshare.model.errors import InvalidAnnotation


@given(
    st.builds(
        AliyunAllocation,
        minors=st.lists(st.integers(0, 15), min_size=1, max_size=4).map(tuple),
        pod_mib=st.integers(0, 10**6),
        dev_mib=st.one_of(st.none(), st.integers(0, 10**6)),
        assume_time_ns=st.integers(0, 2**63),
        assigned=st.booleans(),
    )
)
def test_aliyun_round_trip(a: AliyunAllocation) -> None:
    assert decode_aliyun(encode_aliyun(a)) == a


def test_aliyun_malformed() -> None:
    assert decode_aliyun({}) is None
    for bad in ({aliyun.ALIYUN_IDX: "x"}, {aliyun.ALIYUN_IDX: "0", aliyun.ALIYUN_POD: "-1"}):
        with pytest.raises(InvalidAnnotation):
            decode_aliyun(bad)
    with pytest.raises(InvalidAnnotation):
        decode_aliyun({aliyun.ALIYUN_IDX: "0", aliyun.ALIYUN_ASSIGNED: "maybe"})
