"""The dialect registry: a new dialect is one module and one ``register`` line, and every caller
(the pod reader, the annotation writer, the webhook's renames, the managed resource list) sees it."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model import dialects, names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.dialects.base import Dialect, read_whole
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.podresources import requests_devices
from devshare.model.problems import Problems
from devshare.model.request import WHOLE, DeviceRequest, PodRequest
from devshare.server.webhook.mutate import mutation

ACME = "acme.example/gpu"
OLD_ACME = "acme.example/accelerator"


class AcmeDialect(Dialect):
    """A made-up dialect: ``acme.example/gpu: N`` whole GPUs, annotated ``acme.example/cards``."""

    name = "acme"
    resource_names = frozenset({ACME, OLD_ACME})
    managed_resources = (ACME,)
    renamed_names = frozenset({OLD_ACME})

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        n = read_whole(resources, ACME, where, problems, "GPUs")
        if n is not None and n > 8:
            problems.add(where, f"{ACME} is {n}: an acme node has 8 GPUs, ask at most 8")
            return []
        return [DeviceRequest(type=names.GPU, count=n, core_milli=WHOLE, memory_ratio_milli=WHOLE)] if n else []

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return {"acme.example/cards": ",".join(str(m) for m in alloc.minors(names.GPU))}

    def renames(self, resources: dict[str, Any]) -> dict[str, Any]:
        out = dict(resources)
        if OLD_ACME in out and ACME not in out:
            out[ACME] = out.pop(OLD_ACME)
        return out


@pytest.fixture
def acme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dialects, "DIALECTS", dict(dialects.DIALECTS))
    for private in ("_resource_names", "_owner", "_renamers", "_rank"):  # register() replaces them: put them back after
        monkeypatch.setattr(dialects, private, getattr(dialects, private))
    dialects.register(AcmeDialect())


def acme_pod(value: str, name: str = ACME) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {name: value}}}]}}


def test_a_registered_dialect_is_read_written_and_renamed(acme: None) -> None:
    pod = parse_pod(acme_pod("2"))
    assert pod.dialect == "acme"
    assert pod.containers[0].devices == (DeviceRequest(type=names.GPU, count=2, core_milli=WHOLE,
                                                       memory_ratio_milli=WHOLE),)
    assert requests_devices(acme_pod("2"))
    assert validate_pod(acme_pod("9")) == [
        "container 'c': acme.example/gpu is 9: an acme node has 8 GPUs, ask at most 8"]
    alloc = PodAllocation(node="n", containers=(ContainerAllocation(name="c", devices=(
        DeviceGrant(type=names.GPU, minor=3, core_milli=WHOLE, memory_ratio_milli=WHOLE),)),))
    assert encode_annotations(pod, alloc, now_ns=1)["acme.example/cards"] == "3"
    assert ACME in dialects.managed_resources()
    ops, _ = mutation(acme_pod("1", OLD_ACME))
    assert {"op": "add", "path": "/spec/containers/0/resources/limits/acme.example~1gpu", "value": "1"} in ops


def test_two_dialects_in_one_container_are_refused(acme: None) -> None:
    p = acme_pod("1")
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    (msg,) = validate_pod(p)
    assert "several dialects (acme, nvidia)" in msg


def test_an_unregistered_name_is_not_a_device() -> None:
    assert not requests_devices(acme_pod("2"))
    assert parse_pod(acme_pod("2")).containers[0].devices == ()


def test_a_resource_name_belongs_to_one_dialect(acme: None) -> None:
    class Copycat(AcmeDialect):
        name = "copycat"

    with pytest.raises(ValueError, match=r"acme\.example/gpu"):
        dialects.register(Copycat())
