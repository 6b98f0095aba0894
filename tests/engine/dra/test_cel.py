"""DRA's CEL selectors on cel-expr-python, with Kubernetes' quantity and semver functions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from devshare.engine.dra.cel import CelError, compile_selector
from devshare.model.draslices import SliceDevice, Version

GPU = SliceDevice(
    driver="gpu.devshare.io", pool="n1", node="n1", name="gpu-0",
    attributes={"gpu.devshare.io": {"type": "gpu", "model": "NVIDIA A100-SXM4-80GB", "minor": 0, "numaNode": 1,
                                    "driverVersion": Version("535.104.5")}},
    capacity={"gpu.devshare.io": {"compute": Fraction(100), "memory": Fraction(80 * 2**30)}}, multiple=True)


def matches(expr: str) -> bool:
    ok, err = compile_selector(expr).matches(GPU)
    assert not err or not ok
    return ok


@pytest.mark.parametrize(("expr", "want"), [
    ('device.driver == "gpu.devshare.io"', True),
    ('device.attributes["gpu.devshare.io"].model.lowerAscii().contains("a100")', True),
    ('device.attributes["gpu.devshare.io"].numaNode == 1 && device.allowMultipleAllocations', True),
    ('device.capacity["gpu.devshare.io"].memory.compareTo(quantity("16Gi")) >= 0', True),
    ('device.capacity["gpu.devshare.io"].memory.isGreaterThan(quantity("100Gi"))', False),
    ('device.capacity["gpu.devshare.io"].memory == quantity("80Gi")', True),
    ('device.capacity["gpu.devshare.io"].compute.add(quantity("1")).asInteger() == 101', True),
    ('device.attributes["gpu.devshare.io"].driverVersion.isGreaterThan(semver("530.0.0"))', True),
    ('device.attributes["gpu.devshare.io"].driverVersion.compareTo(semver("v535.104", true)) > 0', True),
    ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
    ('semver("1.0.0-alpha.2").isLessThan(semver("1.0.0-alpha.10"))', True),
    ('isQuantity("16Gi") && !isQuantity("sixteen") && isSemver("1.2.3") && !isSemver("1.2")', True),
    ('cel.bind(d, device.attributes["gpu.devshare.io"], d.minor == 0 && d.type == "gpu")', True),
    # a domain the device has nothing in reads as an empty map, as in Kubernetes
    ('device.attributes["other.example.com"].size() == 0', True),
    ('"x" in device.attributes["other.example.com"]', False),
])
def test_kubernetes_dra_expressions(expr: str, want: bool) -> None:
    assert matches(expr) is want


def test_a_runtime_error_does_not_match_and_says_why() -> None:
    ok, err = compile_selector('device.attributes["gpu.devshare.io"].missing == 1').matches(GPU)
    assert not ok and "missing" in err
    ok, err = compile_selector('quantity("1").compareTo(semver("1.0.0")) == 0').matches(GPU)
    assert not ok and "quantit" in err


@pytest.mark.parametrize(("expr", "library"), [
    ('isIP("10.0.0.1")', "IP"), ('url("https://x").getHost() == "x"', "URLs"), ("[1, 2].sum() == 3", "lists"),
    ('"a".find("a") == "a"', "regex"),
])
def test_kubernetes_functions_devshare_lacks_are_named(expr: str, library: str) -> None:
    with pytest.raises(CelError, match=f"Kubernetes' {library} CEL library"):
        compile_selector(expr)


def test_bad_expressions_are_refused_with_the_checkers_message() -> None:
    with pytest.raises(CelError, match="does not compile"):
        compile_selector("device.driver ==")
    with pytest.raises(CelError, match="must evaluate to a bool"):
        compile_selector('"a string"')
    with pytest.raises(CelError, match="characters long"):
        compile_selector("true && " * 2000 + "true")
