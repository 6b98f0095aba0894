"""What every dialect shares: reading a whole-number resource (with its unit's maximum), the pod spec
as the readers of placed pods see it (never raising), and the Dialect protocol's defaults."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model.allocation import PodAllocation
from devshare.model.dialects.base import (
    MAXIMUM,
    Dialect,
    read_whole,
    restartable_init,
    spec_containers,
    whole_quantity,
)
from devshare.model.problems import Problems
from devshare.model.request import MAX_DEVICES, DeviceRequest, PodRequest


def read(value: Any, unit: str = "GPUs") -> tuple[int | None, list[str]]:
    problems = Problems()
    return read_whole({"x.example/gpu": value}, "x.example/gpu", "container 'c'", problems, unit), problems.messages()


def test_a_whole_number_is_read() -> None:
    assert read("2") == (2, [])
    assert read(3) == (3, [])
    assert read("1k", "MiB") == (1000, [])
    assert read("-3") == (-3, [])  # the sign is the dialect's rule to judge (nvidia.whole_devices)
    assert read_whole({}, "x.example/gpu", "c", Problems(), "GPUs") is None


@pytest.mark.parametrize(("value", "unit", "message"), [
    ("1.5", "GPUs", "container 'c': x.example/gpu is 1.5; it must be a whole number of GPUs"),
    ("500m", "percent", "container 'c': x.example/gpu is 0.5; it must be a whole number of percent"),
    ("lots", "GPUs", "container 'c': x.example/gpu: 'lots' is not a Kubernetes quantity"),
    (None, "GPUs", "container 'c': x.example/gpu: expected a quantity string such as 16Gi or 500m, got NoneType"),
    ("1025", "GPUs", f"container 'c': x.example/gpu is '1025', far beyond any device: it must be at most "
                     f"{MAX_DEVICES} devices"),
    ("102401", "percent", "container 'c': x.example/gpu is '102401', far beyond any device: it must be at most "
                          "102400 (1024 whole devices)"),
    ("2Pi", "bytes", "container 'c': x.example/gpu is '2Pi', far beyond any device: it must be at most 1Pi (1 PiB)"),
    ("1073741825", "MiB", "container 'c': x.example/gpu is '1073741825', far beyond any device: it must be at most "
                          "1073741824 (1 PiB)"),
])
def test_what_is_no_whole_number_or_too_large_is_a_problem(value: Any, unit: str, message: str) -> None:
    got, problems = read(value, unit)
    assert got is None and len(problems) == 1 and problems[0].startswith(message), problems


@given(st.sampled_from(sorted(MAXIMUM)), st.one_of(st.integers(-10**20, 10**20), st.text(max_size=12),
                                                  st.decimals(allow_nan=False, allow_infinity=False).map(str)))
def test_a_value_is_read_or_reported_never_both(unit: str, value: Any) -> None:
    got, problems = read(value, unit)
    assert (got is None) == (len(problems) == 1) and len(problems) <= 1
    if got is not None:
        assert got <= MAXIMUM[unit][0]


def test_an_unlimited_unit_has_no_maximum() -> None:
    assert read(str(10**30), "cores") == (10**30, [])


def test_spec_containers_merges_limits_under_requests() -> None:
    spec = {"initContainers": [{"name": "warm", "resources": {"limits": {"a": "1"}}}],
            "containers": [{"name": "main", "resources": {"limits": {"a": "2", "b": "1"}, "requests": {"a": "3"}}},
                           {"resources": {"requests": {1: "x"}}}, "not a container", {"name": 5}]}
    init, app = spec_containers(spec)
    assert init == [("warm", {"a": "1"})]
    assert app == [("main", {"a": "3", "b": "1"}), ("#1", {"1": "x"}), ("#3", {})]


@pytest.mark.parametrize("spec", [None, [], "x", {"containers": "x"}, {"containers": [{"resources": ["x"]}]},
                                  {"containers": [{"name": "c", "resources": {"limits": ["x"]}}]}])
def test_spec_containers_never_raises(spec: Any) -> None:
    init, app = spec_containers(spec)
    assert init == [] and all(res == {} for _, res in app)


def test_restartable_init_containers_are_the_sidecars() -> None:
    spec = {"initContainers": [{"name": "proxy", "restartPolicy": "Always"}, {"name": "warm"},
                               {"name": "once", "restartPolicy": "OnFailure"}, "x"]}
    assert restartable_init(spec) == frozenset({"proxy"})
    assert restartable_init({"initContainers": "x"}) == frozenset() and restartable_init(None) == frozenset()


def test_whole_quantity() -> None:
    assert (whole_quantity("2"), whole_quantity(3), whole_quantity("2k")) == (2, 3, 2000)
    assert whole_quantity("0.5") is None and whole_quantity("lots") is None and whole_quantity(None) is None


class Minimal(Dialect):
    name = "minimal"
    resource_names = frozenset({"minimal.example/gpu"})

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return []


def test_the_protocols_defaults_change_nothing() -> None:
    d = Minimal()
    resources = {"minimal.example/gpu": "1"}
    assert d.renames(resources) is resources
    assert not d.carries("nvidia", resources) and not d.absorbs("nvidia", resources)
    assert d.pod_context({}, 1, Problems()) is None
    assert d.read_placed({"a": "b"}, {}) is None
    assert d.encode(PodRequest(namespace="n", name="p"), PodAllocation(node="n"), now_ns=0, device_memory=None) == {}
    assert (d.managed_resources, d.renamed_names, d.allocation_annotations, d.schedule_mode) == (
        (), frozenset(), frozenset(), "index")
    with pytest.raises(TypeError):
        Dialect()  # type: ignore[abstract]
