"""DRA in a dry run (``devshare schedule`` with ResourceSlices, DeviceClasses, ResourceClaims and
ResourceClaimTemplates in its ``--cluster`` file): the same allocation the controller makes, on a
state in memory, with no API server.

Slices a file does not give are made from its Device objects (what devshare's agent publishes);
DeviceClasses it does not give are devshare's shipped ones. Allocated claims are counted before any
pod is placed (a claim that would over-book a card is reported and not counted, as in the cluster).
A pod's claim from a template is made as the resourceclaim controller makes it
(``<pod>-<claim name>``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from devshare.engine.dra.allocate import PodAsk, Refusal, allocate, record_request, recorded
from devshare.engine.dra.inventory import Inventory
from devshare.engine.lifecycle import Lifecycle
from devshare.model import dra, draslices
from devshare.model.dra import Claim, node_filter, parse_claim, pod_claims
from devshare.model.draslices import parse_device_class, parse_slice
from devshare.model.errors import InvalidInput

KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")

T = TypeVar("T")


def _located(parse: Callable[[Any], T], obj: Any, where: str) -> T:
    """``parse(obj)``, its InvalidInput prefixed with ``where`` (the object's place in the file)."""
    try:
        return parse(obj)
    except InvalidInput as e:
        if not where:
            raise
        raise InvalidInput(e.message, field=f"{where}: {e.field}" if e.field else where) from None


@dataclass
class Placed:
    node: str | None
    reason: str = ""
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # claim name -> status.allocation


class DryRun:
    def __init__(self, lifecycle: Lifecycle) -> None:
        self.lifecycle = lifecycle
        self.state = lifecycle.state
        self.inventory = Inventory()
        self.claims: dict[str, dict[str, Any]] = {}
        self.templates: dict[str, dict[str, Any]] = {}
        self.problems: list[str] = []  # allocated claims not counted, with why
        self._ids = itertools.count(1)

    def add(self, obj: dict[str, Any], where: str = "") -> None:
        """One object of the file (a kind of :data:`KINDS`); bad content raises InvalidInput."""
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise InvalidInput(f"{kind} has no metadata.name", field=where)
        if kind == "ResourceSlice":
            self.inventory.set_slice(meta["name"], _located(parse_slice, obj, where))
        elif kind == "DeviceClass":
            self.inventory.set_class(_located(parse_device_class, obj, where))
        elif kind == "ResourceClaim":
            claim = _located(parse_claim, obj, where)
            self.claims[claim.key] = obj
        else:
            key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
            # read now, so a bad template is named with its place in the file, not when a pod uses it
            _located(lambda o: dra.template_devices(o, f"{kind} {key}"), obj, where)
            self.templates[key] = obj

    def start(self) -> None:
        """Slices and classes the file lacks, then the allocated claims counted."""
        published = {d.node for devs in self.inventory.slices.values() for d in devs if d.driver == dra.DRIVER}
        for node, nd in sorted(self.state.devices.items()):
            if node not in published:
                obj = draslices.slice_object(nd)
                self.inventory.set_slice(obj["metadata"]["name"], parse_slice(obj))
        for name, (dtype, whole) in dra.shipped_classes().items():
            if name not in self.inventory.classes:
                self.inventory.set_class(parse_device_class(draslices.device_class_object(name, dtype, whole=whole)))
        for obj in self.claims.values():
            self._count(parse_claim(obj))

    def _count(self, claim: Claim) -> None:
        alloc = recorded(self.state, self.inventory, claim)
        if alloc is None:
            return
        reason = self.lifecycle.add_watched(record_request(claim), alloc)
        if reason is not None:
            self.problems.append(f"claim {claim.key}: not counted, it would over-book a device: {reason}")

    def _serves(self, device_class: str) -> bool:
        info = self.inventory.classes.get(device_class)
        return bool(info.device_type) if info is not None else device_class in dra.shipped_classes()

    def place(self, pod: dict[str, Any], *, cpu_milli: int = 0, memory_bytes: int = 0) -> Placed:
        """Allocate ``pod``'s claims of devshare's classes; the node they fix ("" when none of its
        claims is devshare's) or why not."""
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        mine: list[Claim] = []
        nodes: set[str] = set()
        for ref in pod_claims(pod):
            claim_name = ref.claim or f"{name}-{ref.name}"
            key = f"{ns}/{claim_name}"
            if key not in self.claims and ref.template:
                tmpl = self.templates.get(f"{ns}/{ref.template}")
                if tmpl is None:
                    return Placed(None, f"ResourceClaimTemplate {ns}/{ref.template} is not in the cluster file")
                self.claims[key] = {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim",
                                    "metadata": {"name": claim_name, "namespace": ns,
                                                 "uid": f"dry-run-{next(self._ids)}", "resourceVersion": "1"},
                                    "spec": tmpl["spec"]["spec"]}
            obj = self.claims.get(key)
            if obj is None:
                return Placed(None, f"ResourceClaim {key} is not in the cluster file")
            claim = parse_claim(obj)
            if not any(self._serves(c) for c in claim.classes()):
                continue
            if claim.allocation is not None:
                if claim.allocation.node:
                    nodes.add(claim.allocation.node)
                continue
            mine.append(claim)
        if len(nodes) > 1:
            return Placed(None, f"the pod's claims are allocated on different nodes ({', '.join(sorted(nodes))})")
        node = next(iter(nodes), "")
        if not mine:
            return Placed(node)
        ask = PodAsk(namespace=ns, name=name, uid=str(meta.get("uid") or ""), claims=tuple(mine), node=node,
                     nodes=node_filter(pod), cpu_milli=cpu_milli, memory_bytes=memory_bytes)
        try:
            decision = allocate(self.lifecycle.scheduler, self.inventory, ask,
                                share_id=lambda: f"00000000-0000-4000-8000-{next(self._ids):012d}")
        except Refusal as e:
            return Placed(None, e.message)
        self.lifecycle.arrived(decision.request)
        out: dict[str, dict[str, Any]] = {}
        for cd in decision.claims:
            self.lifecycle.assume(cd.record, cd.allocation, now=0.0, ttl=float("inf"))
            self.lifecycle.confirm(cd.record, cd.allocation)
            status = dra.allocation_status(list(cd.results), decision.node)
            obj = dict(self.claims[cd.claim.key])
            obj["status"] = {**(obj.get("status") or {}), "allocation": status}
            self.claims[cd.claim.key] = obj
            out[cd.claim.name] = status
        return Placed(decision.node, claims=out)
