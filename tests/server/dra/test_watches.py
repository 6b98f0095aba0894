"""The DRA controller's informers (server/dra/watches.py): the first list says why DRA is off when it
cannot work (no resource.k8s.io/v1, no RBAC) instead of retrying; a re-list delivers what vanished as
DELETED, then what is listed; each kind remembers the resourceVersion its watch resumes from."""

from __future__ import annotations

from typing import Any

from devshare.kube.backend import ListResult
from devshare.kube.errors import BackendError, NotFound
from devshare.server.dra.watches import DraWatches, keys
from support.waiting import settled


class Api:
    def __init__(self, error: BackendError | None = None, items: list[dict[str, Any]] | None = None) -> None:
        self.error = error
        self.items = items or []
        self.lists = 0

    async def list(self, kind: str) -> Any:
        self.lists += 1
        if self.error is not None:
            raise self.error
        return ListResult(items=self.items, resource_version="42")


def claim(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}}


async def test_the_first_list_says_why_dra_is_off_without_retrying() -> None:
    unserved = Api(NotFound("resourceclaims: the API server does not serve it"))
    why = await settled(DraWatches(unserved, lambda *a: None, lambda k: {}).list_all())  # type: ignore[arg-type]
    assert "does not serve resource.k8s.io/v1" in why and unserved.lists == 1
    refused = Api(BackendError("forbidden", code=403))
    why = await settled(DraWatches(refused, lambda *a: None, lambda k: {}).list_all())  # type: ignore[arg-type]
    assert "kubectl apply -k deploy/dra" in why and refused.lists == 1


async def test_a_re_list_delivers_what_vanished_then_what_is_listed() -> None:
    seen: list[tuple[str, str, str]] = []
    held = {"default/gone": claim("gone"), "default/kept": claim("kept")}
    api = Api(items=[claim("kept"), claim("new")])
    watches = DraWatches(api, lambda kind, type_, obj: seen.append((kind, type_, obj["metadata"]["name"])),  # type: ignore[arg-type]
                         lambda kind: held if kind == "resourceclaims" else keys(["gpu.devshare.io"]))
    await settled(watches.list("resourceclaims", initial=False))
    assert seen == [("resourceclaims", "DELETED", "gone"), ("resourceclaims", "ADDED", "kept"),
                    ("resourceclaims", "ADDED", "new")]
    assert watches.versions["resourceclaims"] == "42"
    seen.clear()
    api.items = []
    await settled(watches.list("deviceclasses", initial=False))  # classes are held parsed: by name alone
    assert seen == [("deviceclasses", "DELETED", "gpu.devshare.io")]
