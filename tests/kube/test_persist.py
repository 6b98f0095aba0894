"""The cluster file (kube/persist.py): one JSON document per object, read back equal (a JSON document as
JSON, a YAML one as YAML), a file replaced whole or not at all, and commits that share writes and are
answered once on disk.
Through the extender's binds (disk full, a write stuck off the loop, group commit under load):
tests/server/extender/test_serve.py."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import devshare
from devshare.kube.memory import MemoryBackend
from devshare.kube.persist import SnapshotWriter, decode_documents, encode_documents, load_documents, write_atomic
from devshare.model.errors import InvalidInput
from support.waiting import settled

# floats msgspec writes with a dot and no exponent, which YAML reads as floats (the others, 1e16: the
# loader reads a JSON document as JSON)
PLAIN_FLOATS = st.floats(min_value=-1e15, max_value=1e15).filter(lambda f: f == 0 or abs(f) >= 1e-4)


def json_values(floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    """JSON's values (keys are strings)."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | floats | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )


JSON = json_values(PLAIN_FLOATS)
ANY_JSON = json_values(st.floats(allow_nan=False, allow_infinity=False))


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "x"}]}}


def loaded(path: Path) -> list[Any]:
    return list(yaml.safe_load_all(path.read_text()))


@given(st.lists(st.dictionaries(st.text(), JSON, max_size=5), max_size=5))
def test_every_object_loads_back_as_yaml(objects: list[dict[str, Any]]) -> None:
    """The saved file is YAML (kubectl reads it): YAML reads each JSON document back as the object it was
    (but floats with an exponent, see ANY_JSON)."""
    data = encode_documents(objects)
    assert list(yaml.safe_load_all(data.decode())) == objects
    assert data.count(b"---\n") == len(objects)


# what JSON writes as it is and YAML refuses to read, or reads as a line break
NOT_YAML = [*(chr(c) for c in range(0x7F, 0xA0)), "\u2028", "\u2029", "\ufffe", "\uffff"]


@pytest.mark.parametrize("loader", [yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)])
def test_characters_yaml_refuses_are_escaped(loader: type[yaml.SafeLoader]) -> None:
    obj = pod("p")
    obj["metadata"]["annotations"] = {f"k{i}": f"a{c}b" for i, c in enumerate(NOT_YAML)}
    obj["metadata"]["annotations"][f"key-{NOT_YAML[0]}"] = "é \xa0 \u2027 \U0001f600"  # these it reads as they are
    data = encode_documents([obj])
    assert all(f"\\u{ord(c):04x}".encode() in data for c in NOT_YAML)
    assert list(yaml.load_all(data.decode(), Loader=loader)) == [obj]


def test_a_saved_cluster_loads_again_whatever_its_strings(tmp_path: Path) -> None:
    """A cluster file may spell any character as an escape ("\\x7f"); saving it must not write one the
    next start cannot read."""
    obj = pod("p")
    obj["metadata"]["annotations"] = {"note": "".join(NOT_YAML)}
    source = tmp_path / "cluster.yaml"
    source.write_text(yaml.safe_dump(obj))  # PyYAML's own escapes
    MemoryBackend.load(source).save(tmp_path / "saved.yaml")
    [again] = MemoryBackend.load(tmp_path / "saved.yaml").objects()
    assert again["metadata"]["annotations"] == {"note": "".join(NOT_YAML)}


def test_a_float_with_an_exponent_loads_back_as_a_float(tmp_path: Path) -> None:
    """msgspec writes 1e16 and 1e-20 without a dot, which YAML 1.1 (PyYAML) reads as strings: the loader
    reads a JSON document as JSON."""
    objects = [{"big": 1e16, "tiny": 1e-20, "huge": -1.5e300, "int": 2**70}]
    assert list(decode_documents(encode_documents(objects).decode(), "f")) == objects
    obj = pod("p")
    obj["spec"]["priority"] = 1e16
    (tmp_path / "saved.yaml").write_bytes(encode_documents([obj]))
    assert MemoryBackend.load(tmp_path / "saved.yaml").objects() == [obj]


@given(st.lists(st.dictionaries(st.text(), ANY_JSON, max_size=5), max_size=5))
def test_every_saved_object_reads_back_equal(objects: list[dict[str, Any]]) -> None:
    """Whatever the saver writes, the loader reads back as it was: every float included."""
    assert list(decode_documents(encode_documents(objects).decode(), "f")) == objects


@given(st.lists(st.tuples(st.booleans(), st.dictionaries(st.text(), ANY_JSON, max_size=4)), max_size=5))
def test_a_file_of_json_and_yaml_documents_reads_each_as_what_it_is(docs: list[tuple[bool, dict[str, Any]]]) -> None:
    """A saved file edited by hand (YAML documents among the JSON ones): each JSON document is read as
    JSON, each YAML one as YAML (as PyYAML reads it alone)."""
    text = "".join(yaml.safe_dump(d, explicit_start=True) if as_yaml else encode_documents([d]).decode()
                   for as_yaml, d in docs)
    expected = [yaml.safe_load(yaml.safe_dump(d)) if as_yaml else d for as_yaml, d in docs]
    assert list(decode_documents(text, "f")) == expected


def test_yaml_written_by_hand_still_reads_as_yaml() -> None:
    text = ('%YAML 1.1\n---\nkind: Node\nversion: 1e3\n---\n{"kind": "Pod", "x": 1e3}\n'
            '---\n{kind: Pod, x: 1e3}\n--- # a comment\n{"x": 1e3}\n---\n{"x": 1e3}\n...\n'
            '%YAML 1.1\n---\n{"x": 1e3}\n--- [1e3]\n---\n---\n\ufeff')
    assert list(decode_documents("\ufeff" + text, "f")) == [
        {"kind": "Node", "version": "1e3"},  # YAML 1.1: no dot, a string
        {"kind": "Pod", "x": 1000.0},  # JSON
        {"kind": "Pod", "x": "1e3"},  # a YAML flow mapping (its keys are not quoted)
        {"x": "1e3"},  # a comment: YAML
        {"x": "1e3"},  # an end marker: YAML
        {"x": "1e3"},  # after a directive: YAML
        [1000.0],  # JSON on the marker's line
        None,  # an empty document
        None,
    ]


def test_a_yaml_error_names_the_document_line_and_column_among_json_ones() -> None:
    text = '---\n{"kind": "Node"}\n---\n{"kind": "Pod"}\n---\nkind: Pod\nmetadata: [\n---\n{"kind": "Pod"}\n'
    with pytest.raises(InvalidInput, match=r"^cluster.yaml, document 3, line 8, column 1: not valid YAML"):
        list(decode_documents(text, "cluster.yaml"))
    with pytest.raises(InvalidInput, match=r"^cluster.yaml, document 2, line 4, column 5: not valid YAML"):
        list(decode_documents('{"kind": "Node"}\n---\na: 1\nb: c: d\n', "cluster.yaml"))


def test_load_documents_skips_empty_ones_and_errors_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "objs.yaml"
    f.write_text("---\nkind: Node\n---\n# nothing\n---\nkind: Pod\n")
    assert load_documents(f) == [{"kind": "Node"}, {"kind": "Pod"}]
    f.write_text("kind: Node\n---\nkind: [\n")
    with pytest.raises(InvalidInput, match=rf"^{f}, document 2, line 4, column 1: not valid YAML"):
        load_documents(f)
    f.write_bytes(b"kind: Node\nname: \xff\n")
    with pytest.raises(InvalidInput, match=rf"^{f}: not a text file \(byte 0xff at position 17 is not UTF-8\)"):
        load_documents(f)


def test_every_reader_of_cluster_files_goes_through_the_loader() -> None:
    """One owner: no other module reads documents with PyYAML (a second reader would read the saved
    file's floats as strings again)."""
    src = Path(devshare.__file__).parent
    readers = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                     if re.search(r"\bload_all\(|safe_load_all\(", p.read_text()))
    assert readers == ["kube/persist.py"]


def test_one_document_a_line() -> None:
    assert encode_documents([{"a": 1}, {"b": "x/y"}]) == b'---\n{"a":1}\n---\n{"b":"x/y"}\n'
    assert encode_documents([]) == b""


def test_write_atomic_replaces_the_file(tmp_path: Path) -> None:
    out = tmp_path / "cluster.yaml"
    out.write_text("old")
    write_atomic(out, b"new")
    assert out.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.yaml"]  # no temporary file left


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    """The rename fails (the path is a directory): the error is raised, the temporary file removed, and
    what was there is untouched."""
    out = tmp_path / "cluster.yaml"
    out.mkdir()
    (out / "keep").write_text("kept")
    with pytest.raises(IsADirectoryError):
        write_atomic(out, b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.yaml"] and (out / "keep").read_text() == "kept"
    with pytest.raises(FileNotFoundError):  # no directory to put it in
        write_atomic(tmp_path / "missing" / "cluster.yaml", b"new")


class Objects:
    """The objects a writer saves, and how often it took a snapshot of them."""

    def __init__(self, *names: str) -> None:
        self.objects = [pod(n) for n in names]
        self.snapshots = 0
        self.on_snapshot: Any = None

    def snapshot(self) -> list[dict[str, Any]]:
        self.snapshots += 1
        taken = list(self.objects)
        if self.on_snapshot is not None:
            hook, self.on_snapshot = self.on_snapshot, None
            hook()
        return taken


def names(path: Path) -> list[str]:
    return [d["metadata"]["name"] for d in loaded(path)]


async def test_commit_returns_once_the_objects_are_on_disk(tmp_path: Path) -> None:
    objs = Objects("a", "b")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    assert await settled(writer.commit()) is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b"] and writer.writes == 1
    objs.objects.append(pod("c"))
    assert await settled(writer.commit()) is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b", "c"] and writer.writes == 2


async def test_commits_that_come_together_share_one_write(tmp_path: Path) -> None:
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    assert await settled(asyncio.gather(*(writer.commit() for _ in range(20)))) == [None] * 20
    assert writer.writes == 1 and objs.snapshots == 1


async def test_a_commit_made_during_a_write_waits_for_the_next_one(tmp_path: Path) -> None:
    """A change made after the snapshot of a write began is not in that write: its commit is answered by
    the next write, whose snapshot holds it."""
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    later: list[asyncio.Task[str | None]] = []

    def change_after_the_snapshot() -> None:
        objs.objects.append(pod("b"))
        later.append(asyncio.ensure_future(writer.commit()))

    objs.on_snapshot = change_after_the_snapshot
    assert await settled(writer.commit()) is None
    assert await settled(later[0]) is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b"]
    assert writer.writes == 2 and objs.snapshots == 2


async def test_a_caller_that_goes_away_does_not_stop_the_write(tmp_path: Path) -> None:
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    gone = asyncio.ensure_future(writer.commit())
    stays = asyncio.ensure_future(writer.commit())
    await asyncio.sleep(0)  # both waiting for the write
    gone.cancel()
    assert await settled(stays) is None
    assert gone.cancelled() and names(tmp_path / "cluster.yaml") == ["a"]


async def test_a_failed_write_is_answered_with_why_counted_and_tried_again(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "cluster.yaml"
    out.mkdir()  # the rename over it fails
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, out)
    with caplog.at_level(logging.INFO, logger="devshare.kube.persist"):
        why = await settled(writer.commit())
        assert why == "IsADirectoryError: Is a directory"  # not the temporary file's random name
        assert writer.failures == 1 and writer.writes == 0 and writer.last_error == why
        assert await settled(writer.commit()) == why  # the same failure: counted, logged once
        assert writer.failures == 2
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert warnings[0].startswith(f"could not save the cluster to {out} (the previous file is kept): ")
        out.rmdir()  # the way is clear: the next commit writes, and says so
        assert await settled(writer.commit()) is None
    assert names(out) == ["a"] and writer.writes == 1 and writer.last_error is None
    assert any(r.getMessage() == f"saved the cluster to {out} again" for r in caplog.records)
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.yaml"]  # no temporary file of the failures


async def test_close_writes_once_more_after_any_write_on_its_way(tmp_path: Path) -> None:
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    pending = asyncio.ensure_future(writer.commit())
    await asyncio.sleep(0)
    objs.objects.append(pod("b"))  # changed with no commit: close saves it
    await settled(writer.close())
    assert pending.done() and pending.result() is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b"] and writer.writes == 2


async def test_close_after_nothing_still_saves(tmp_path: Path) -> None:
    writer = SnapshotWriter(Objects("a").snapshot, tmp_path / "cluster.yaml")
    await settled(writer.idle())  # nothing pending: returns
    await settled(writer.close())
    assert names(tmp_path / "cluster.yaml") == ["a"]
