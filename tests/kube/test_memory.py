"""MemoryBackend: a ``--cluster`` file loaded, pods bound in memory, saved back."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devshare.kube.errors import Conflict, NotFound
from devshare.kube.memory import MemoryBackend
from devshare.model.errors import InvalidInput
from support.kube import device, node, pod
from support.waiting import settled


def write(path: Path, docs: list[object]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    return write(tmp_path / "cluster.yaml", [
        node("n1"), device("n1"),
        pod("running", node_name="n1", grants=[(0, 50, 8)]),
        pod("waiting", ns="team"),
    ])


async def test_load_bind_save_round_trip(cluster_file: Path, tmp_path: Path) -> None:
    b = MemoryBackend.load(cluster_file)
    pods = (await b.list("pods")).items
    assert {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods} == {"running": "n1", "waiting": None}

    await b.patch_pod_annotations("team", "waiting", {"devshare.io/allocation": "{}", "x": None})
    await b.bind_pod("team", "waiting", "n1")
    with pytest.raises(Conflict):
        await b.bind_pod("team", "waiting", "n1")
    with pytest.raises(NotFound):
        await b.bind_pod("team", "nobody", "n1")

    out = tmp_path / "out.yaml"
    b.save(out)
    docs = list(yaml.safe_load_all(out.read_text()))
    assert [d["kind"] for d in docs] == ["Node", "Device", "Pod", "Pod"]
    waiting = docs[3]
    assert waiting["spec"]["nodeName"] == "n1"
    assert waiting["metadata"]["annotations"]["devshare.io/allocation"] == "{}"
    assert all("resourceVersion" not in d["metadata"] for d in docs)

    again = MemoryBackend.load(out)
    assert again.objects() == b.objects()


async def test_unchanged_save_reproduces_the_objects(cluster_file: Path, tmp_path: Path) -> None:
    b = MemoryBackend.load(cluster_file)
    b.save(tmp_path / "same.yaml")
    before = list(yaml.safe_load_all(cluster_file.read_text()))
    after = list(yaml.safe_load_all((tmp_path / "same.yaml").read_text()))
    before[3]["metadata"]["namespace"] = "team"
    before[2]["metadata"]["namespace"] = "default"
    assert after == before


async def test_watch_sees_binds(cluster_file: Path) -> None:
    b = MemoryBackend.load(cluster_file)
    listed = await b.list("pods")
    events = b.watch("pods", listed.resource_version)
    await b.bind_pod("team", "waiting", "n1")
    ev = await settled(anext(events))
    assert ev.type == "MODIFIED" and ev.object["spec"]["nodeName"] == "n1"
    await events.aclose()


def test_list_documents_are_flattened(tmp_path: Path) -> None:
    f = write(tmp_path / "c.yaml", [{"apiVersion": "v1", "kind": "List", "items": [node("a"), node("b")]}])
    assert [o["metadata"]["name"] for o in MemoryBackend.load(f).objects()] == ["a", "b"]


@pytest.mark.parametrize(("docs", "expected"), [
    ([node("a"), ["not", "a", "mapping"]], "document 2: expected a Node, Device or Pod object"),
    ([node("a"), {"kind": "Service", "metadata": {"name": "s"}}], "document 2: kind 'Service' is not one of"),
    ([{"kind": "Node", "metadata": {}}], "document 1: Node has no metadata.name"),
    ([node("a"), node("a")], "document 2: Node a is already defined in"),
    ([pod("p"), pod("p")], "document 2: Pod default/p is already defined in"),
    ([{**device("a"), "apiVersion": "v1"}], "document 1: apiVersion of a Device must be devshare.io/v1alpha1"),
    ([device("a"), {**device("b"), "spec": {"devices": [{"type": "gpu", "minor": -1}]}}],
     "document 2: Device b: spec.devices[0]: minor must be an integer >= 0"),
    ([node("a", {"devshare.io/gpu-compute-policy": "bogus"})],
     "document 1: Node a: label devshare.io/gpu-compute-policy"),
    ([{**pod("p"), "metadata": {"name": "p", "annotations": {"a": 1}}}], "document 1: Pod p: metadata.annotations"),
    ([{"kind": "List", "items": [node("a"), {"kind": "Foo"}]}], "document 1, items[1]: kind 'Foo'"),
])
def test_bad_files_name_the_file_and_document(tmp_path: Path, docs: list[object], expected: str) -> None:
    f = write(tmp_path / "bad.yaml", docs)
    with pytest.raises(InvalidInput) as err:
        MemoryBackend.load(f)
    assert str(err.value).startswith(str(f))
    assert expected in str(err.value)


def test_bad_yaml_names_the_document(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: [b\n")
    with pytest.raises(InvalidInput, match=r"bad\.yaml, document 2, line 6, column 1: not valid YAML"):
        MemoryBackend.load(f)


async def test_leases_conflict_on_stale_version() -> None:
    b = MemoryBackend()
    lease = await b.create_lease("ns", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})
    with pytest.raises(Conflict):
        await b.create_lease("ns", {"metadata": {"name": "l"}, "spec": {}})
    newer = await b.replace_lease("ns", {**lease, "spec": {"holderIdentity": "b"}})
    with pytest.raises(Conflict):
        await b.replace_lease("ns", {**lease, "spec": {"holderIdentity": "c"}})
    assert (await b.get_lease("ns", "l")) == newer
