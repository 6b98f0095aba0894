"""The node's GPU labels: koordlet's spelling made valid label values, one model or none."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from devshare.agent.inventory import Gpu, Inventory
from devshare.agent.labels import MAX_VALUE, gpu_labels, label_value, model_value, node_model
from devshare.model import names

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # the API server's rule


def inv(*models: str, driver: str = "535.104.05", vendor: str = "nvidia") -> Inventory:
    return Inventory(gpus=tuple(Gpu(minor=i, uuid=f"GPU-{i}", model=m) for i, m in enumerate(models)),
                     driver_version=driver, vendor=vendor)


def test_models_as_koordlet_spells_them() -> None:
    assert model_value("NVIDIA A100-SXM4-80GB") == "A100-SXM4-80GB"
    assert model_value("Tesla V100-SXM2-16GB") == "Tesla-V100-SXM2-16GB"
    assert model_value("NVIDIA GeForce RTX 2080 Ti") == "GeForce-RTX-2080-Ti"
    assert model_value("NVIDIA H100 80GB HBM3") == "H100-80GB-HBM3"
    assert model_value("  (weird) model / x  ") == "weird-model-x"
    assert model_value("") == "" and model_value("???") == ""


@given(st.text(max_size=200))
def test_every_value_is_a_valid_label_value(text: str) -> None:
    for value in (label_value(text), model_value(text)):
        assert LABEL_VALUE.match(value) and len(value) <= MAX_VALUE, value


def test_labels_of_a_node() -> None:
    labels = gpu_labels(inv("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"))
    assert labels == {
        names.NODE_GPU_MODEL: "A100-SXM4-80GB", names.KOORD_NODE_GPU_MODEL: "A100-SXM4-80GB",
        names.NODE_GPU_DRIVER: "535.104.05", names.KOORD_NODE_GPU_DRIVER: "535.104.05",
        names.NODE_GPU_VENDOR: "nvidia", names.KOORD_NODE_GPU_VENDOR: "nvidia",
    }
    assert set(labels) == set(names.GPU_NODE_LABELS)
    # several models: no model label (the scheduler then reads each card's model), as koordlet does
    mixed = gpu_labels(inv("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"))
    assert mixed[names.NODE_GPU_MODEL] is None and mixed[names.KOORD_NODE_GPU_MODEL] is None
    assert mixed[names.NODE_GPU_DRIVER] == "535.104.05"
    assert node_model(inv("Tesla T4", "Tesla  T4")) == "Tesla-T4"  # the same model, spelt alike
    # no GPU: every label goes (None: the merge patch removes a stale one)
    assert set(gpu_labels(inv(driver="")).values()) == {None}
    assert gpu_labels(inv("T4", driver=""))[names.NODE_GPU_DRIVER] is None
