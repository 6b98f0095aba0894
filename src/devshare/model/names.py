"""Every resource name, label and annotation key devshare reads or writes, in one place."""

from __future__ import annotations

# --- device types
GPU = "gpu"
RDMA = "rdma"
FPGA = "fpga"

# --- Koordinator (seed 001); current koordinator.sh/ names and the seed's older kubernetes.io/ ones
KOORD_PREFIXES = ("koordinator.sh/", "kubernetes.io/")
KOORD_GPU = "koordinator.sh/gpu"
KOORD_GPU_CORE = "koordinator.sh/gpu-core"
KOORD_GPU_MEMORY = "koordinator.sh/gpu-memory"
KOORD_GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
KOORD_RDMA = "koordinator.sh/rdma"
KOORD_FPGA = "koordinator.sh/fpga"
LEGACY_GPU = "kubernetes.io/gpu"
LEGACY_GPU_CORE = "kubernetes.io/gpu-core"
LEGACY_GPU_MEMORY = "kubernetes.io/gpu-memory"
LEGACY_GPU_MEMORY_RATIO = "kubernetes.io/gpu-memory-ratio"
LEGACY_RDMA = "kubernetes.io/rdma"
LEGACY_FPGA = "kubernetes.io/fpga"

# --- NVIDIA
NVIDIA_GPU = "nvidia.com/gpu"

# --- mGPU (seed 000)
MGPU_CORE = "vke.volcengine.com/mgpu-core"
MGPU_MEMORY = "vke.volcengine.com/mgpu-memory"
MGPU_MULTIPLE = "vke.volcengine.com/container-multiple-gpu"
MGPU_ASSUMED = "vke.volcengine.com/assumed"
MGPU_INDEX_PREFIX = "vke.volcengine.com/gpu-index-container-"

# --- Aliyun (seed 002)
ALIYUN_GPU_MEM = "aliyun.com/gpu-mem"
ALIYUN_GPU_COUNT = "aliyun.com/gpu-count"
ALIYUN_IDX = "ALIYUN_COM_GPU_MEM_IDX"
ALIYUN_POD = "ALIYUN_COM_GPU_MEM_POD"
ALIYUN_DEV = "ALIYUN_COM_GPU_MEM_DEV"
ALIYUN_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
ALIYUN_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
ALIYUN_CONTAINER = "ALIYUN_COM_GPU_MEM_CONTAINER"  # env: MiB the container asked

# --- devshare's own
ALLOCATION = "devshare.io/allocation"
ASSIGNED = "devshare.io/assigned"  # set by the node agent once every container got its devices
NODE_GPU_MODEL = "devshare.io/gpu-model"
COMPUTE_POLICY = "devshare.io/gpu-compute-policy"  # node label and pod annotation
MULTI_GPU_SHARE = "devshare.io/multi-gpu-share"  # node label "true"
COMPUTE_POLICIES = ("fixed-share", "guaranteed-burst-share", "native-burst-share")
MULTI_SHARE_POLICY = "native-burst-share"

# --- Koordinator allocation and topology (seeds 001, 003)
KOORD_DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
TOPOLOGY_GPU = "topology.scheduling.koordinator.sh/gpu"
GROUP_NAME = "gputopology.scheduling.koordinator.sh/name"
GROUP_REPLICA = "gputopology.scheduling.koordinator.sh/replica"
GANG_NAME = "gang.scheduling.koordinator.sh/name"
GANG_MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"

# --- Device resource
DEVICE_API_VERSION = "devshare.io/v1alpha1"
DEVICE_KIND = "Device"
DEVICE_CHECKPOINTS = "node.koordinator.sh/devices-checkpoints"

# Device resource names inside a Device's spec.devices[].resources
DEV_GPU_CORE = ("koordinator.sh/gpu-core", "kubernetes.io/gpu-core")
DEV_GPU_MEMORY = ("koordinator.sh/gpu-memory", "kubernetes.io/gpu-memory")
DEV_GPU_MEMORY_RATIO = ("koordinator.sh/gpu-memory-ratio", "kubernetes.io/gpu-memory-ratio")

# Extended resource names devshare manages (what kube-scheduler must route to the extender);
# never the kubernetes.io/ spellings (see DESIGN.md, facts checked against a real kube-scheduler).
MANAGED_RESOURCES = (
    KOORD_GPU,
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY,
    KOORD_GPU_MEMORY_RATIO,
    KOORD_RDMA,
    KOORD_FPGA,
    NVIDIA_GPU,
    MGPU_CORE,
    MGPU_MEMORY,
    ALIYUN_GPU_MEM,
    ALIYUN_GPU_COUNT,
)

MIN_GPU_MEMORY = 256 * 2**20  # seed 000: MinGPUMemory, too little for a container to run below it

# --- pod-side names read by the dialect parser (model/pod.py)
POD_GPU_MODEL = "devshare.io/gpu-model"  # pod annotation: allowed GPU models, "A100|H100" (or comma-separated)
# Every container resource name that asks for a managed device, kubernetes.io/ spellings included
DEVICE_RESOURCE_NAMES = (
    *MANAGED_RESOURCES,
    LEGACY_GPU,
    LEGACY_GPU_CORE,
    LEGACY_GPU_MEMORY,
    LEGACY_GPU_MEMORY_RATIO,
    LEGACY_RDMA,
    LEGACY_FPGA,
)


# Annotations that say where a pod's devices are (what devshare writes at bind, and the node agent's
# marks): only devshare's own identities may write them (the validating webhook refuses anyone
# else; devshare.server.webhook.allocations).
ALLOCATION_ANNOTATIONS = frozenset({
    ALLOCATION, ASSIGNED, KOORD_DEVICE_ALLOCATED, TOPOLOGY_GPU, MGPU_ASSUMED,
    ALIYUN_IDX, ALIYUN_POD, ALIYUN_DEV, ALIYUN_ASSUME_TIME, ALIYUN_ASSIGNED,
})


def is_allocation_annotation(key: str) -> bool:
    return key in ALLOCATION_ANNOTATIONS or key.startswith(MGPU_INDEX_PREFIX)
