"""Allocation annotations: encoders and decoders, one module per format.

- :mod:`.canonical`: ``devshare.io/allocation`` (the whole truth after a restart)
- :mod:`.koordinator`: ``scheduling.koordinator.sh/device-allocated`` (seed 001)
- :mod:`.mgpu`: ``vke.volcengine.com/gpu-index-container-<name>`` + ``assumed`` (seed 000)
- :mod:`.aliyun`: ``ALIYUN_COM_GPU_MEM_*`` (seed 002)
- :mod:`.topology`: ``topology.scheduling.koordinator.sh/gpu`` (seed 003)
- :mod:`.annotations`: :func:`encode_annotations`, all of the above for one pod
"""

from devshare.model.codecs.aliyun import AliyunAllocation, decode_aliyun, encode_aliyun
from devshare.model.codecs.annotations import aliyun_allocation, container_gpus, encode_annotations
from devshare.model.codecs.canonical import decode_allocation, encode_allocation, encode_canonical, parse_allocation
from devshare.model.codecs.koordinator import decode_koordinator, device_totals, encode_koordinator
from devshare.model.codecs.mgpu import decode_mgpu, encode_mgpu
from devshare.model.codecs.topology import decode_topology, encode_topology

__all__ = [
    "AliyunAllocation",
    "aliyun_allocation",
    "container_gpus",
    "decode_aliyun",
    "decode_allocation",
    "decode_koordinator",
    "decode_mgpu",
    "decode_topology",
    "device_totals",
    "encode_aliyun",
    "encode_allocation",
    "encode_annotations",
    "encode_canonical",
    "encode_koordinator",
    "encode_mgpu",
    "encode_topology",
    "parse_allocation",
]
