"""The names shared by every dialect: device types, devshare's own labels and annotations, seed 003's
group and gang keys and the Device resource. Each dialect's own resource names and annotation keys
live in its module (:mod:`devshare.model.dialects`)."""

from __future__ import annotations

# --- device types
GPU = "gpu"
RDMA = "rdma"
FPGA = "fpga"

# --- devshare's own
ALLOCATION = "devshare.io/allocation"
ASSIGNED = "devshare.io/assigned"  # set by the node agent once every container got its devices
TRADE = "devshare.io/trade"  # <partner uid>: two identical pods exchanged allocations (devshare.model.trade)
NODE_GPU_MODEL = "devshare.io/gpu-model"  # node label (the agent sets it; the scheduler reads it)
NODE_GPU_DRIVER = "devshare.io/gpu-driver-version"  # node label set by the agent
NODE_GPU_VENDOR = "devshare.io/gpu-vendor"  # node label set by the agent
COMPUTE_POLICY = "devshare.io/gpu-compute-policy"  # node label and pod annotation
MULTI_GPU_SHARE = "devshare.io/multi-gpu-share"  # node label "true"
COMPUTE_POLICIES = ("fixed-share", "guaranteed-burst-share", "native-burst-share")
MULTI_SHARE_POLICY = "native-burst-share"

# --- Koordinator's node labels (koordlet puts them on the Device, koord-manager copies them to the Node)
KOORD_NODE_GPU_MODEL = "node.koordinator.sh/gpu-model"
KOORD_NODE_GPU_DRIVER = "node.koordinator.sh/gpu-driver-version"
KOORD_NODE_GPU_VENDOR = "node.koordinator.sh/gpu-vendor"
# every node label the agent owns (it sets them from discovery and removes those it cannot tell)
GPU_NODE_LABELS = (NODE_GPU_MODEL, NODE_GPU_DRIVER, NODE_GPU_VENDOR,
                   KOORD_NODE_GPU_MODEL, KOORD_NODE_GPU_DRIVER, KOORD_NODE_GPU_VENDOR)

# --- Koordinator's group topology and gang (seed 003)
TOPOLOGY_GPU = "topology.scheduling.koordinator.sh/gpu"
GROUP_NAME = "gputopology.scheduling.koordinator.sh/name"
GROUP_REPLICA = "gputopology.scheduling.koordinator.sh/replica"
GANG_NAME = "gang.scheduling.koordinator.sh/name"
GANG_MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"

# --- Device resource
DEVICE_API_VERSION = "devshare.io/v1alpha1"
DEVICE_KIND = "Device"
DEVICE_CHECKPOINTS = "node.koordinator.sh/devices-checkpoints"
# the key seed 001's Device example writes the same list under (both are read)
GPU_CHECKPOINTS = "node.koordinator.sh/gpu-checkpoints"
KOORD_DEVICE_API_VERSION = "scheduling.koordinator.sh/v1alpha1"  # Koordinator's Device, as koordlet writes it

# Device resource names inside a Device's spec.devices[].resources
DEV_GPU_CORE = ("koordinator.sh/gpu-core", "kubernetes.io/gpu-core")
DEV_GPU_MEMORY = ("koordinator.sh/gpu-memory", "kubernetes.io/gpu-memory")
DEV_GPU_MEMORY_RATIO = ("koordinator.sh/gpu-memory-ratio", "kubernetes.io/gpu-memory-ratio")

# --- pod-side names read by the dialect parser (model/pod.py)
POD_GPU_MODEL = "devshare.io/gpu-model"  # pod annotation: allowed GPU models, "A100|H100" (or comma-separated)
# pod annotations selecting GPUs, as HAMi reads them (comma-separated lists): the GPUs a pod may use
# (use) or must avoid (nouse), by id (UUID, exact) or by type (the card's model, a case-insensitive substring)
GPU_USE_UUID = "nvidia.com/use-gpuuuid"
GPU_NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
GPU_USE_TYPE = "nvidia.com/use-gputype"
GPU_NOUSE_TYPE = "nvidia.com/nouse-gputype"
GPU_SELECTION = (GPU_USE_UUID, GPU_NOUSE_UUID, GPU_USE_TYPE, GPU_NOUSE_TYPE)
