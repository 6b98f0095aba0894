"""The claim ledger as API objects: one ConfigMap per node, in devshare's namespace, that every
extender replica writes before it binds a pod to that node (docs/deploy.md, "Several replicas").

::

    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: devshare-claims-gpu-node-1          # devshare-claims-<node> (hashed when too long)
      namespace: devshare-system
      labels: {devshare.io/claim-ledger: "v1"}
    data:
      node: gpu-node-1
      claims: '[{"pod": "team-a/trainer", "uid": "...", "by": "devshare-scheduler-7d9f-x/3f2a9c",
                 "at": "2026-01-02T03:04:05.123456Z", "priority": 0,
                 "allocation": {"node": "gpu-node-1", "containers": [...]}}]'

Each claim is a pod's allocation as the canonical annotation writes it (``devshare.io/allocation``:
devices with their compute share and memory), who wrote it and when. Every write is a
compare-and-swap: a create (409 when another replica created it first) or a PUT carrying the
``metadata.resourceVersion`` it was read at (409 when anyone wrote in between). This module only
reads, encodes and writes; what goes in a write is decided by
:mod:`devshare.server.extender.claims`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import msgspec

from devshare.kube.backend import Backend, meta
from devshare.kube.errors import Conflict, NotFound
from devshare.kube.leader import micro_time, parse_micro_time
from devshare.model.allocation import PodAllocation
from devshare.model.codecs import encode_allocation, parse_allocation
from devshare.model.errors import InvalidInput

LABEL = "devshare.io/claim-ledger"
LABEL_VALUE = "v1"
PREFIX = "devshare-claims-"
NAME_LIMIT = 253  # a ConfigMap's name is a DNS subdomain


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """One pod's claim on devices of a node: recorded before its Binding is sent."""

    pod: str  # namespace/name
    uid: str
    by: str  # the replica that wrote it
    at: float  # when (seconds since the epoch, the writer's clock)
    allocation: PodAllocation
    priority: int = 0


@dataclass(frozen=True)
class NodeLedger:
    """A node's ledger as read (or written) at ``resource_version`` (None: no such ConfigMap yet).
    ``error``: why it could not be read (a hand-edited ConfigMap); it is then never written over."""

    node: str
    resource_version: str | None = None
    claims: Mapping[str, Claim] = field(default_factory=dict)  # by pod key
    error: str | None = None


class _WireClaim(msgspec.Struct):
    pod: str
    allocation: msgspec.Raw
    uid: str = ""
    by: str = ""
    at: str = ""
    priority: int = 0


_decoder = msgspec.json.Decoder(list[_WireClaim])


def object_name(node: str) -> str:
    """The ConfigMap of ``node``'s ledger: ``devshare-claims-<node>``, or a digest of the node's name
    when that would be too long (the node's name is also in ``data.node``)."""
    name = PREFIX + node
    if len(name) <= NAME_LIMIT:
        return name
    return PREFIX + hashlib.sha256(node.encode()).hexdigest()[:40]


@lru_cache(maxsize=8192)  # about 3 MB: the claims of the nodes written lately
def encode_claim(c: Claim) -> str:
    """One claim's JSON. Cached: a node's ledger is written whole, so each of its claims would otherwise be
    encoded again at every write of the node (a claim is immutable and stays while its pod lives)."""
    head = msgspec.json.encode({"pod": c.pod, "uid": c.uid, "by": c.by, "at": micro_time(c.at),
                                "priority": c.priority})
    return (head[:-1] + b',"allocation":' + encode_allocation(c.allocation).encode() + b"}").decode()


def encode_claims(claims: Mapping[str, Claim]) -> str:
    return "[" + ",".join(encode_claim(c) for c in sorted(claims.values(), key=lambda c: c.pod)) + "]"


def decode_claims(text: str, node: str) -> dict[str, Claim]:
    """The claims of a ledger's ``data.claims``. Raises InvalidInput when it is not one."""
    where = f"ConfigMap {object_name(node)} data.claims"
    try:
        wire = _decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InvalidInput(f"not a list of claims ({e})", field=where) from None
    out: dict[str, Claim] = {}
    for w in wire:
        alloc = parse_allocation(bytes(w.allocation).decode())
        if alloc.node != node:
            raise InvalidInput(f"the claim of pod {w.pod} names node {alloc.node}, not {node}", field=where)
        at = parse_micro_time(w.at)
        out[w.pod] = Claim(pod=w.pod, uid=w.uid, by=w.by, at=0.0 if at is None else at, allocation=alloc,
                           priority=w.priority)
    return out


def decode(obj: Mapping[str, Any], node: str | None = None) -> NodeLedger:
    """A ledger from its ConfigMap (``node``: the node it must be of, when known)."""
    data = obj.get("data") or {}
    name = node or str(data.get("node") or "")
    rv = str(meta(obj).get("resourceVersion") or "") or None
    if not isinstance(data, dict) or (node is not None and data.get("node") not in (None, node)):
        return NodeLedger(name, rv, {}, f"ConfigMap {meta(obj).get('name')} is not the claim ledger of node {name}")
    try:
        claims = decode_claims(str(data.get("claims") or "[]"), name)
    except InvalidInput as e:
        return NodeLedger(name, rv, {}, str(e))
    return NodeLedger(name, rv, claims)


class ClaimLedger:
    """Reads and compare-and-swap writes of the nodes' ledgers in ``namespace``."""

    def __init__(self, backend: Backend, namespace: str | None = None) -> None:
        self.backend = backend
        self.namespace = namespace or backend.namespace

    def where(self, node: str) -> str:
        """How to name a node's ledger in a message (the ConfigMap, namespaced)."""
        return f"ConfigMap {self.namespace}/{object_name(node)}"

    async def read(self, node: str) -> NodeLedger:
        obj = await self.backend.get_config_map(self.namespace, object_name(node))
        return NodeLedger(node) if obj is None else decode(obj, node)

    async def list(self) -> dict[str, NodeLedger]:
        """Every node's ledger, by node."""
        out: dict[str, NodeLedger] = {}
        for obj in await self.backend.list_config_maps(self.namespace, f"{LABEL}={LABEL_VALUE}"):
            ledger = decode(obj)
            if ledger.node and meta(obj).get("name") == object_name(ledger.node):
                out[ledger.node] = ledger
        return out

    async def write(self, ledger: NodeLedger, claims: Mapping[str, Claim]) -> NodeLedger:
        """Replace ``ledger`` (as read) by ``claims``: Conflict when it changed since it was read,
        or was created meanwhile (when it did not exist), or deleted meanwhile."""
        node = ledger.node
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": object_name(node), "namespace": self.namespace,
                         "labels": {LABEL: LABEL_VALUE, "app.kubernetes.io/name": "devshare"}},
            "data": {"node": node, "claims": encode_claims(claims)},
        }
        if ledger.resource_version is None:
            out = await self.backend.create_config_map(self.namespace, body)
        else:
            body["metadata"]["resourceVersion"] = ledger.resource_version
            try:
                out = await self.backend.replace_config_map(self.namespace, body)
            except NotFound as e:
                raise Conflict(f"{self.where(node)} was deleted since it was read: {e}", code=409) from e
        return NodeLedger(node, str(meta(out).get("resourceVersion") or "") or None, dict(claims))
