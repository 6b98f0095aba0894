"""Claims released when a pod is deleted before its scheduling gate was lifted (server/dra/release.py):
only devshare's classes, only claims no other pending pod of the namespace uses, allocated and not
reserved by kube-scheduler; never while the pod still exists, never from a replica that does not lead.
Through the controller and the fake API server: tests/server/dra/test_controller.py."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from devshare.kube.errors import BackendError, Conflict, Unavailable
from devshare.model import dra
from devshare.server.dra.release import release_claims

OURS = {dra.CLASS_GPU, dra.CLASS_WHOLE_GPU}


def claim(name: str, *, cls: str = dra.CLASS_GPU, allocated: bool = True, reserved: bool = False,
          ns: str = "default") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": dra.API_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}},
        "status": {},
    }
    if allocated:
        obj["status"]["allocation"] = {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.devshare.io", "pool": "n1", "device": "gpu-0"}]},
            "nodeSelector": dra.node_selector("n1")}
    if reserved:
        obj["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    return obj


def pod(name: str, *claims: str, uid: str | None = None, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}"},
            "spec": {"resourceClaims": [{"name": f"r{i}", "resourceClaimName": c} for i, c in enumerate(claims)]}}


class Api:
    """The DRA API as release_claims uses it: the pod read once, each released claim's status written."""

    def __init__(self, pods: dict[str, dict[str, Any]] | None = None, *, get_fails: BackendError | None = None,
                 refuse: dict[str, BackendError] | None = None) -> None:
        self.pods = pods or {}
        self.get_fails = get_fails
        self.refuse = refuse or {}
        self.written: list[dict[str, Any]] = []

    async def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        assert kind == "pods"
        if self.get_fails is not None:
            raise self.get_fails
        return self.pods.get(f"{namespace}/{name}")

    async def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.refuse:
            raise self.refuse[name]
        self.written.append(obj)
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = "8"
        return stored


async def release(api: Api, old: dict[str, Any], *, pods: dict[str, dict[str, Any]] | None = None,
                  claims: list[dict[str, Any]], leader: bool = True) -> list[str]:
    key = f"{old['metadata']['namespace']}/{old['metadata']['name']}"
    by_key = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in claims}
    out = await release_claims(api, key, old, pods=pods or {}, claims=by_key,  # type: ignore[arg-type]
                               serves=OURS.__contains__, is_leader=lambda: leader)
    for parsed, stored in out:  # what is returned is the claim released and the object the server stored
        assert stored["metadata"]["resourceVersion"] == "8" and "allocation" not in stored["status"]
        assert parsed.key == f"{stored['metadata']['namespace']}/{stored['metadata']['name']}"
    return [c.name for c, _ in out]


async def test_a_deleted_pods_allocated_claims_are_released() -> None:
    api = Api()
    c1, c2 = claim("c1"), claim("c2", cls=dra.CLASS_WHOLE_GPU)
    before = copy.deepcopy([c1, c2])
    assert await release(api, pod("p", "c1", "c2"), claims=[c1, c2]) == ["c1", "c2"]
    assert [w["metadata"]["name"] for w in api.written] == ["c1", "c2"]
    assert all("allocation" not in w["status"] for w in api.written)
    assert all(w["metadata"]["resourceVersion"] == "7" for w in api.written)  # the precondition: as last seen
    assert [c1, c2] == before  # the informer's objects are never changed in place


async def test_a_pod_that_still_exists_keeps_its_claims() -> None:
    """Gone from the pending pods because it was bound, not deleted: the same uid is still there."""
    api = Api({"default/p": pod("p", "c1")})
    assert await release(api, pod("p", "c1"), claims=[claim("c1")]) == []
    assert api.written == []


async def test_a_pod_deleted_and_made_again_releases_the_old_ones_claims() -> None:
    api = Api({"default/p": pod("p", "c1", uid="uid-new")})
    assert await release(api, pod("p", "c1"), claims=[claim("c1")]) == ["c1"]


async def test_when_it_cannot_be_told_whether_the_pod_exists_nothing_is_released(
        caplog: pytest.LogCaptureFixture) -> None:
    api = Api(get_fails=Unavailable("connection refused"))
    with caplog.at_level(logging.WARNING):
        assert await release(api, pod("p", "c1"), claims=[claim("c1")]) == []
    assert api.written == []
    assert ("pod default/p: cannot tell whether it still exists (connection refused); its claims stay allocated"
            in caplog.messages)


async def test_a_replica_that_does_not_lead_writes_nothing() -> None:
    api = Api()
    assert await release(api, pod("p", "c1"), claims=[claim("c1")], leader=False) == []
    assert api.written == []


async def test_a_claim_another_pending_pod_of_the_namespace_uses_is_kept() -> None:
    api = Api()
    others = {"default/q": pod("q", "shared"), "team/r": pod("r", "mine", ns="team")}
    claims = [claim("shared"), claim("mine")]
    assert await release(api, pod("p", "shared", "mine"), pods=others, claims=claims) == ["mine"]  # r: another ns


async def test_only_allocated_unreserved_claims_of_devshares_classes_are_released() -> None:
    api = Api()
    claims = [claim("free", allocated=False), claim("reserved", reserved=True),
              claim("theirs", cls="gpu.nvidia.com"), claim("ours")]
    old = pod("p", "free", "reserved", "theirs", "ours", "missing")
    assert await release(api, old, claims=claims) == ["ours"]


async def test_an_unreadable_claim_is_skipped_and_the_others_released() -> None:
    bad = claim("bad")
    bad["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": dra.CLASS_GPU, "count": 0}
    assert await release(Api(), pod("p", "bad", "good"), claims=[bad, claim("good")]) == ["good"]


async def test_a_refused_write_skips_that_claim_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    api = Api(refuse={"c1": Conflict("the object has been modified", code=409)})
    with caplog.at_level(logging.INFO):
        assert await release(api, pod("p", "c1", "c2"), claims=[claim("c1"), claim("c2")]) == ["c2"]
    assert "claim default/c1 of deleted pod default/p not released: the object has been modified" in caplog.messages
    assert "claim default/c2 released: its pod default/p was deleted before it was scheduled" in caplog.messages
