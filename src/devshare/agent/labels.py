"""The node's GPU labels: model, driver version and vendor, from what discovery found.

The agent puts them on its Node (so ``nodeSelector`` / node affinity on the model works without
labelling nodes by hand) and on its Device object, under devshare's keys and Koordinator's
(``node.koordinator.sh/gpu-model``, ``gpu-driver-version``, ``gpu-vendor``: koordlet writes them on
the Device and koord-manager copies them to the Node). Values follow koordlet's spelling, made
valid label values: NVML's ``NVIDIA A100-SXM4-80GB`` is ``A100-SXM4-80GB``, ``Tesla V100-SXM2-16GB``
is ``Tesla-V100-SXM2-16GB``. A node whose GPUs are of several models gets no model label (as
koordlet); a value the agent cannot tell is ``None``: the merge patch removes a stale label.
"""

from __future__ import annotations

import re

from devshare.agent.inventory import Inventory
from devshare.model import names

MAX_VALUE = 63  # a label value's length limit
_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def label_value(text: str) -> str:
    """``text`` as a valid label value: runs of other characters become ``-``, the ends are
    alphanumeric, at most 63 characters ("" when nothing is left)."""
    value = _EDGE.sub("", _INVALID.sub("-", text.strip()))
    return _EDGE.sub("", value[:MAX_VALUE])


def model_value(model: str) -> str:
    """A GPU model as a label value, as koordlet spells it (no ``NVIDIA `` prefix, spaces as ``-``)."""
    text = model.strip()
    if text.upper().startswith("NVIDIA "):
        text = text[len("NVIDIA "):]
    return label_value(text)


def node_model(inv: Inventory) -> str:
    """The node's GPU model as a label value: the one model all its GPUs share ("" for none or several)."""
    models = {model_value(g.model) for g in inv.gpus}
    return models.pop() if len(models) == 1 else ""


def gpu_labels(inv: Inventory) -> dict[str, str | None]:
    """Every label of :data:`names.GPU_NODE_LABELS`, its value or None (remove it)."""
    model = node_model(inv) or None
    driver = label_value(inv.driver_version) if inv.gpus else ""
    vendor = label_value(inv.vendor) if inv.gpus else ""
    return {
        names.NODE_GPU_MODEL: model, names.KOORD_NODE_GPU_MODEL: model,
        names.NODE_GPU_DRIVER: driver or None, names.KOORD_NODE_GPU_DRIVER: driver or None,
        names.NODE_GPU_VENDOR: vendor or None, names.KOORD_NODE_GPU_VENDOR: vendor or None,
    }
