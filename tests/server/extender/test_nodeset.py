"""The extender's caches: node lists by their bytes, prioritize answers encoded per row, pods by
their JSON. Each must answer exactly as the plain path would, also after the cluster changes."""

from __future__ import annotations

import json
import random
import re

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.state import ClusterState
from devshare.model.node import NodeInfo
from devshare.server.extender.nodeset import (
    BUCKET,
    NameTable,
    NodeSets,
    PriorityEncoder,
    _hash_table,
    encode_priorities,
    resolve,
)
from support.extender import cluster, names_body, pod, post, running


def state_of(names: list[str]) -> ClusterState:
    s = ClusterState()
    for n in names:
        s.upsert_node(NodeInfo(name=n))
    return s


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([f"n{i}" for i in range(12)]), unique=True, min_size=1),
       st.data())
def test_encoded_priorities_equal_the_plain_encoding(names: list[str], data: st.DataObject) -> None:
    state = state_of(names)
    enc = PriorityEncoder(state)
    # the cluster changes between answers: nodes leave, others come (rows are reused)
    for _ in range(3):
        gone = data.draw(st.lists(st.sampled_from(sorted(state.row_of)), unique=True, max_size=len(state.row_of) - 1))
        for n in gone:
            state.remove_node(n)
        for n in data.draw(st.lists(st.sampled_from([f"m{i}" for i in range(6)]), unique=True)):
            state.upsert_node(NodeInfo(name=n))
        asked = data.draw(st.permutations(sorted(state.row_of)))
        scores = data.draw(st.lists(st.integers(0, 10), min_size=len(asked), max_size=len(asked)))
        nodes = resolve(state, list(asked))
        got = enc.encode(nodes.rows, np.array(scores, np.int64))
        plain = encode_priorities(list(asked), scores)
        assert json.loads(got) == json.loads(plain)
        assert re.sub(rb" +(?=[,\]])", b"", got) == plain  # the same bytes but for padding between elements


NAME_CHARS = st.sampled_from("abz09-.,\"\\ \x00é")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(NAME_CHARS, min_size=1, max_size=20), unique=True, min_size=1, max_size=30), st.data())
def test_the_name_table_reads_exactly_what_the_dict_reads(names: list[str], data: st.DataObject) -> None:
    """Whatever bytes it is given, the table answers the rows the state's dict gives for the decoded
    names, or None (the caller decodes): never another row, never a body that is not that JSON."""
    state = state_of(names)
    table = NameTable(state.name_of)
    asked = data.draw(st.lists(st.sampled_from([*names, "ghost", "a,b"]), max_size=12))
    raw = msgspec.json.encode(asked)
    mangle = data.draw(st.sampled_from(["none", "spaces", "nul", "cut", "append", "swap"]))
    if mangle == "spaces":
        raw = raw.replace(b",", b", ")
    elif mangle == "nul" and len(raw) > 2:
        raw = raw[:-1] + b"\0]"
    elif mangle == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif mangle == "append":
        raw += data.draw(st.sampled_from([b"]", b",", b"x"]))
    elif mangle == "swap" and len(raw) > 3:
        i = data.draw(st.integers(1, len(raw) - 2))
        raw = raw[:i] + data.draw(st.sampled_from([b",", b'"', b"\\", b"x"])) + raw[i + 1:]
    found = table.find(raw)
    if found is None:
        # the common case is always read: compact JSON of known names without escapes or commas
        plain = all(n in state.row_of and "," not in n and msgspec.json.encode(n) == b'"' + n.encode() + b'"'
                    for n in asked)
        assert not (mangle == "none" and plain and asked)
        return
    rows, known = found.rows, found.known
    decoded = msgspec.json.decode(raw, type=list[str])  # what it read is valid JSON: these names
    assert known.tolist() == decoded
    assert rows.tolist() == [state.row_of[n] for n in decoded]


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3000), st.randoms(use_true_random=False))
def test_the_name_table_finds_every_name_of_a_large_cluster(n: int, rnd: random.Random) -> None:
    """Thousands of names, many of them sharing a bucket of the hash table: every one is found."""
    names = [f"node-{rnd.randrange(10**9)}-{i}" for i in range(n)]
    state = state_of(names)
    table = NameTable(state.name_of)
    asked = rnd.sample(names, min(n, 500))
    found = table.find(msgspec.json.encode(asked))
    assert found is not None
    assert found.rows.tolist() == [state.row_of[a] for a in asked]
    assert table.find(msgspec.json.encode([*asked, "node-x"])) is None


def test_the_name_table_finds_names_that_share_a_bucket() -> None:
    names = [f"node-{i:05d}" for i in range(5000)]
    table = NameTable(state_of(names).name_of)
    assert (table._bucket_keys != 0).sum(axis=1).max() > 1  # some names share a bucket
    found = table.find(msgspec.json.encode(names[::-1]))
    assert found is not None and found.known.tolist() == names[::-1]


def test_keys_made_to_collide_leave_the_lists_to_the_decoder() -> None:
    spread = np.random.default_rng(1).integers(0, 2**63, 40, dtype=np.uint64) * np.uint64(2)
    keys = np.concatenate([np.full(BUCKET + 1, 2**63 + 7, np.uint64), spread])
    assert _hash_table(keys) is None
    table = _hash_table(keys[BUCKET:])  # a bucket's worth of equal keys still fits
    assert table is not None
    shift, bucket_keys, bucket_index = table
    for i, k in enumerate(keys[BUCKET:].tolist()):
        b = int(np.uint64(k) >> shift)
        assert i in bucket_index[b][bucket_keys[b] == k].tolist()


def test_the_name_table_follows_nodes_that_come_and_go() -> None:
    state = state_of(["a", "b", "c"])
    sets = NodeSets(state)
    raw = msgspec.json.encode(["c", "a"])
    assert sets.table().find(raw) is not None
    state.remove_node("a")
    assert sets.table().find(raw) is None  # "a" is gone: the list goes the general way
    state.upsert_node(NodeInfo(name="a-much-longer-node-name-than-eight-bytes"))
    got = sets.get(msgspec.json.encode(["a-much-longer-node-name-than-eight-bytes", "c"]))
    assert got.rows.tolist() == [state.row_of["a-much-longer-node-name-than-eight-bytes"], state.row_of["c"]]
    assert got.names == ["a-much-longer-node-name-than-eight-bytes", "c"] and got.unknown == []


def test_node_sets_follow_the_cluster() -> None:
    state = state_of(["a", "b", "c"])
    sets = NodeSets(state, size=2)
    raw = msgspec.json.encode(["a", "c", "ghost"])
    first = sets.get(raw)
    assert first.known.tolist() == ["a", "c"] and first.unknown == ["ghost"]
    assert first.rows.tolist() == [state.row_of["a"], state.row_of["c"]]
    assert sets.get(raw) is first and sets.hits == 1
    state.remove_node("a")
    state.upsert_node(NodeInfo(name="ghost"))  # takes a's row
    again = sets.get(raw)
    assert again is not first
    assert again.known.tolist() == ["c", "ghost"] and again.unknown == ["a"]
    assert again.rows.tolist() == [state.row_of["c"], state.row_of["ghost"]]


async def test_prioritize_reuses_the_filter_without_decoding_the_names_again() -> None:
    backend = cluster(4, gpus=2)
    ask = pod("p", core=25, mem="2Gi", resource_version="3")
    async with running(backend) as (client, runtime):
        ext = runtime.extender
        names = ["node-0", "node-1", "node-2", "node-3"]
        out = await post(client, "/filter", names_body(ask, names))
        misses = ext.requests.nodesets.misses
        scores = await post(client, "/prioritize", names_body(ask, out["NodeNames"]))
        assert ext.requests.nodesets.misses == misses  # matched the filter's answer by its bytes
        assert [h["Host"] for h in scores] == out["NodeNames"]
        # the same list with an unknown node, spelled in camelCase: the plain path
        body = {"Pod": ask, "nodeNames": [*names, "ghost"]}
        scores = await post(client, "/prioritize", body)
        assert [h["Host"] for h in scores] == [*names, "ghost"] and scores[-1]["Score"] == 0
        out2 = await post(client, "/filter", body)
        assert "ghost" in out2["FailedAndUnresolvableNodes"] and out2["NodeNames"] == out["NodeNames"]


def test_a_very_long_name_is_not_padded_into_every_fragment() -> None:
    names = ["a", "b", "c", "x" * 200]
    state = state_of(names)
    enc = PriorityEncoder(state)
    nodes = resolve(state, names)
    got = enc.encode(nodes.rows, np.array([1, 2, 3, 10], np.int64))
    assert got == encode_priorities(names, [1, 2, 3, 10])  # joined, not padded to 200


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([f"n{i}" for i in range(12)] + ["node-" + "x" * 40]), unique=True, min_size=1),
       st.data())
def test_names_json_is_the_json_of_the_names_picked(names: list[str], data: st.DataObject) -> None:
    state = state_of(names)
    nodes = resolve(state, names)
    idx = data.draw(st.lists(st.integers(0, len(names) - 1), unique=True))
    got = nodes.names_json(np.array(idx, np.int64))
    assert json.loads(got) == [names[i] for i in idx]
    assert got == msgspec.json.encode([names[i] for i in idx])  # compact: prioritize compares it byte for byte
