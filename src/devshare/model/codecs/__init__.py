"""The annotation codecs every dialect shares (each dialect's own codec lives in its module,
:mod:`devshare.model.dialects`; :mod:`devshare.model.annotations` writes them all for one pod):

- :mod:`.canonical`: ``devshare.io/allocation`` (the whole truth after a restart)
- :mod:`.topology`: ``topology.scheduling.koordinator.sh/gpu`` (seed 003)
- :mod:`.units`: percent values, index lists and JSON objects on the wire
"""

from devshare.model.codecs.canonical import decode_allocation, encode_allocation, encode_canonical, parse_allocation
from devshare.model.codecs.topology import decode_topology, encode_topology

__all__ = [
    "decode_allocation",
    "decode_topology",
    "encode_allocation",
    "encode_canonical",
    "encode_topology",
    "parse_allocation",
]
