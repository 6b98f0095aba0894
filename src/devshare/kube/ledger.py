"""The claim ledger as an API object: one ConfigMap, in devshare's namespace, that every extender
replica writes before it binds a pod (docs/deploy.md, "Several replicas").

::

    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: devshare-claims
      namespace: devshare-system
      labels: {devshare.io/claim-ledger: "v2"}
    data:
      watermark: "48213"
      claims: '[{"pod": "team-a/trainer", "uid": "...", "by": "devshare-scheduler-7d9f-x/3f2a9c",
                 "at": "2026-01-02T03:04:05.123456Z", "priority": 0,
                 "allocation": {"node": "gpu-node-1", "containers": [...]}}]'

Each claim is a pod's allocation as the canonical annotation writes it (``devshare.io/allocation``:
its node, devices with their compute share and memory), who wrote it and when. The claims are those
of binds in flight: a claim is dropped once its pod is seen bound (or gone). ``watermark`` is a pod
``resourceVersion``: every claim dropped because its pod was seen bound was seen so by a watch of pods
at or before it, so a replica whose own watch has reached the watermark has seen those bindings too
(:mod:`devshare.server.extender.claims`).

Every write is a compare-and-swap: a create (409 when another replica created it first) or a PUT
carrying the ``metadata.resourceVersion`` it was read at (409 when anyone wrote in between). This
module only reads, encodes and writes (and expires a stale claim's pod, :meth:`ClaimLedger.expire`);
what goes in a write is decided by :mod:`devshare.server.extender.claims`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import msgspec

from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, Conflict, NotFound
from devshare.kube.leader import micro_time, parse_micro_time
from devshare.model.allocation import PodAllocation
from devshare.model.codecs import decode_allocation, encode_allocation, parse_allocation
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import TERMINAL_PHASES, meta

log = logging.getLogger(__name__)

LABEL = "devshare.io/claim-ledger"
LABEL_VALUE = "v2"
NAME = "devshare-claims"
EXPIRED_ANNOTATION = "devshare.io/claim-expired"  # written on a pod whose stale claim is released
# what a write may hold (a ConfigMap holds at most 1 MiB): claims beyond it wait for room
SIZE_LIMIT = 768 * 1024


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """One pod's claim on devices of a node: recorded before its Binding is sent."""

    pod: str  # namespace/name
    uid: str
    by: str  # the replica that wrote it
    at: float  # when (seconds since the epoch, the writer's clock)
    allocation: PodAllocation
    priority: int = 0

    @property
    def node(self) -> str:
        return self.allocation.node


@dataclass(frozen=True)
class Ledger:
    """The ledger as read (or written) at ``resource_version`` (None: no such ConfigMap yet).
    ``watermark``: the pod resourceVersion every claim dropped as bound was seen bound by ("": none).
    ``error``: why it could not be read (a hand-edited ConfigMap); it is then never written over."""

    resource_version: str | None = None
    claims: Mapping[str, Claim] = field(default_factory=dict)  # by pod key
    watermark: str = ""
    error: str | None = None


class _WireClaim(msgspec.Struct):
    pod: str
    allocation: msgspec.Raw
    uid: str = ""
    by: str = ""
    at: str = ""
    priority: int = 0


_decoder = msgspec.json.Decoder(list[_WireClaim])


@lru_cache(maxsize=8192)  # about 3 MB: the claims written lately
def encode_claim(c: Claim) -> str:
    """One claim's JSON. Cached: the ledger is written whole, so each of its claims would otherwise be
    encoded again at every write while it stays (a claim is immutable)."""
    head = msgspec.json.encode({"pod": c.pod, "uid": c.uid, "by": c.by, "at": micro_time(c.at),
                                "priority": c.priority})
    return (head[:-1] + b',"allocation":' + encode_allocation(c.allocation).encode() + b"}").decode()


def encode_claims(claims: Mapping[str, Claim]) -> str:
    return "[" + ",".join(encode_claim(c) for c in sorted(claims.values(), key=lambda c: c.pod)) + "]"


def encoded_size(claims: Mapping[str, Claim]) -> int:
    """The length of ``data.claims`` for ``claims`` (what :data:`SIZE_LIMIT` bounds), without encoding it."""
    return 2 + sum(len(encode_claim(c)) for c in claims.values()) + max(len(claims) - 1, 0)


def decode_claims(text: str) -> dict[str, Claim]:
    """The claims of a ledger's ``data.claims``. Raises InvalidInput when it is not one."""
    where = f"ConfigMap {NAME} data.claims"
    try:
        wire = _decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InvalidInput(f"not a list of claims ({e})", field=where) from None
    out: dict[str, Claim] = {}
    for w in wire:
        alloc = parse_allocation(bytes(w.allocation).decode())
        at = parse_micro_time(w.at)
        out[w.pod] = Claim(pod=w.pod, uid=w.uid, by=w.by, at=0.0 if at is None else at, allocation=alloc,
                           priority=w.priority)
    return out


def decode(obj: Mapping[str, Any]) -> Ledger:
    """The ledger from its ConfigMap."""
    data = obj.get("data") or {}
    rv = str(meta(obj).get("resourceVersion") or "") or None
    if not isinstance(data, dict):
        return Ledger(rv, {}, "", f"ConfigMap {NAME} has no data map")
    watermark = data.get("watermark") or ""
    if not isinstance(watermark, str) or not (watermark == "" or watermark.isdigit()):
        return Ledger(rv, {}, "", f"ConfigMap {NAME} data.watermark must be a resourceVersion, got {watermark!r}")
    try:
        claims = decode_claims(str(data.get("claims") or "[]"))
    except InvalidInput as e:
        return Ledger(rv, {}, watermark, str(e))
    return Ledger(rv, claims, watermark)


class ClaimLedger:
    """Reads and compare-and-swap writes of the ledger in ``namespace``."""

    def __init__(self, backend: Backend, namespace: str | None = None) -> None:
        self.backend = backend
        self.namespace = namespace or backend.namespace

    @property
    def where(self) -> str:
        """How to name the ledger in a message (the ConfigMap, namespaced)."""
        return f"ConfigMap {self.namespace}/{NAME}"

    async def read(self) -> Ledger:
        obj = await self.backend.get_config_map(self.namespace, NAME)
        return Ledger() if obj is None else decode(obj)

    async def expire(self, c: Claim, *, now: float) -> bool:
        """Whether a claim older than its TTL may be removed: its pod is written to first (the
        :data:`EXPIRED_ANNOTATION`, which changes its resourceVersion: a Binding of the claim's writer
        still on its way then fails); a pod that is bound with the claim's allocation keeps its claim
        (one bound otherwise, by another replica say, does not: the claim names devices it does not hold)."""
        ns, _, name = c.pod.partition("/")
        try:
            mark = {EXPIRED_ANNOTATION: f"{c.node} {micro_time(now)}"}
            obj = await self.backend.patch_pod_annotations(ns, name, mark)
        except NotFound:
            return True
        except BackendError as e:
            log.info("the stale claim of pod %s on node %s is kept for now: %s", c.pod, c.node, e)
            return False
        m = meta(obj)
        status = obj.get("status") or {}
        if c.uid and m.get("uid") and m.get("uid") != c.uid:
            return True
        if isinstance(status, dict) and status.get("phase") in TERMINAL_PHASES:
            return True
        if (obj.get("spec") or {}).get("nodeName") != c.node:
            return True
        annotations = m.get("annotations")
        try:
            held = decode_allocation(annotations) if isinstance(annotations, dict) else None
        except InvalidInput:
            held = None
        return held != c.allocation

    async def write(self, ledger: Ledger, claims: Mapping[str, Claim], watermark: str) -> Ledger:
        """Replace ``ledger`` (as read) by ``claims`` and ``watermark``: Conflict when it changed since
        it was read, or was created meanwhile (when it did not exist), or deleted meanwhile."""
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": self.namespace,
                         "labels": {LABEL: LABEL_VALUE, "app.kubernetes.io/name": "devshare"}},
            "data": {"watermark": watermark, "claims": encode_claims(claims)},
        }
        if ledger.resource_version is None:
            out = await self.backend.create_config_map(self.namespace, body)
        else:
            body["metadata"]["resourceVersion"] = ledger.resource_version
            try:
                out = await self.backend.replace_config_map(self.namespace, body)
            except NotFound as e:
                raise Conflict(f"{self.where} was deleted since it was read: {e}", code=409) from e
        return Ledger(str(meta(out).get("resourceVersion") or "") or None, dict(claims), watermark)
