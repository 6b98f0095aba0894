"""``devshare schedule --cluster FILE PODS.yaml``: place pods in order, print where and why."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from devshare.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_UNSCHEDULABLE,
    ConfigOption,
    emit,
    fail,
    load_cluster,
    table_console,
    user_errors,
)
from devshare.config import load_config, with_overrides
from devshare.engine.build import Engine, build_engine
from devshare.engine.dra.dryrun import KINDS as DRA_KINDS
from devshare.engine.dra.dryrun import DryRun
from devshare.engine.groups import Bind, GroupPlanner, MemberPlacement, Refuse, Wait
from devshare.engine.policies import LIVE_NAMES
from devshare.kube.persist import load_documents
from devshare.model.allocation import PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.dra import pod_claims
from devshare.model.errors import InvalidInput
from devshare.model.pod import parse_pod
from devshare.model.request import PodRequest


def pods_of(path: Path) -> list[dict[str, Any]]:
    """The Pod objects of a multi-document YAML (``kind: List`` documents are flattened)."""
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(load_documents(path)):
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for j, obj in enumerate(items or []):
            where = f"{path}, document {i + 1}" + (f", items[{j}]" if doc is not obj else "")
            if not isinstance(obj, dict) or obj.get("kind", "Pod") != "Pod":
                kind = obj.get("kind") if isinstance(obj, dict) else type(obj).__name__
                raise InvalidInput(f"expected a Pod, got {kind}", field=where)
            meta = obj.setdefault("metadata", {})
            if not isinstance(meta, dict) or not meta.get("name"):
                raise InvalidInput("metadata.name is missing", field=where)
            meta.setdefault("namespace", "default")
            out.append(obj)
    return out


class Placer:
    """Places pods one by one on a state, the way the extender would (through the same
    :class:`Lifecycle`, so the policy learns of each pod as it does there), recording each result."""

    def __init__(self, engine: Engine, dra_objects: list[tuple[str, Any]] | None = None) -> None:
        self.state = engine.state
        self.refusals = engine.refusals  # what the configuration refuses of a pod before any node
        self.scheduler = engine.scheduler
        self.lifecycle = engine.lifecycle
        self.planner = GroupPlanner(engine.scheduler, lifecycle=self.lifecycle)
        self.results: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.invalid: set[str] = set()  # pods the webhook would refuse (bad input), not merely unschedulable
        self.clock = 0.0
        self.now_ns = time.time_ns()
        # DRA (issue 38): ResourceSlices, DeviceClasses, ResourceClaims(Templates) of the cluster file
        self.dra = DryRun(self.lifecycle)
        for where, obj in dra_objects or []:
            self.dra.add(obj, where)
        self.dra.start()

    def _record(self, key: str, node: str | None, reason: str = "",
                annotations: dict[str, str] | None = None, claims: dict[str, Any] | None = None) -> None:
        if key not in self.results:
            self.order.append(key)
        entry: dict[str, Any] = {"pod": key, "node": node}
        if node is None:
            entry["reason"] = reason
        entry["annotations"] = annotations or {}
        if claims:  # DRA: the status.allocation devshare would write on each of the pod's claims
            entry["claims"] = claims
        self.results[key] = entry

    def _annotate(self, pod: PodRequest, alloc: PodAllocation, visible: list[int] | None = None) -> dict[str, str]:
        return encode_annotations(pod, alloc, now_ns=self.now_ns, visible_gpus=visible,
                                  device_memory=self.state.gpu_memory(alloc.node))

    def place(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        self.clock += 1.0
        try:
            pod = parse_pod(obj)
        except InvalidInput as e:
            self._invalid(key, str(e))
            return
        refused = self.refusals.of_request(pod) or self.refusals.of_pod(obj, frozenset(self.state.tables))
        if refused:
            self._invalid(key, refused)
            return
        if key in self.state.pods:
            self._invalid(key, f"pod {key} already holds devices on {self.state.pods[key].allocation.node}")
            return
        nodes = None
        claims: dict[str, Any] = {}
        if pod_claims(obj):  # DRA (issue 38): its claims are allocated first, as the gate makes it so
            got = self.dra.place(obj, cpu_milli=pod.cpu_milli, memory_bytes=pod.memory_bytes)
            if got.node is None:
                self._record(key, None, got.reason)
                return
            claims = got.claims
            if not pod.has_devices():
                self._record(key, got.node or None, "" if got.node else "no node: its claims are not devshare's",
                             claims=claims)
                return
            nodes = [got.node] if got.node else None
        if pod.group is not None:
            self.lifecycle.arrived(pod)
            self._place_member(pod)
            return
        # kube-scheduler asks the extender about every pod of devshare's profile, asking for a device or not
        placed = self.lifecycle.schedule(pod, now=self.clock, nodes=nodes)
        if placed is None:
            self._record(key, None, self.scheduler.why_unschedulable(pod, nodes))
            return
        self._record(key, placed.node, annotations=self._annotate(pod, placed.allocation), claims=claims)

    def _invalid(self, key: str, reason: str) -> None:
        self.invalid.add(key)
        self._record(key, None, reason)

    def exit_code(self) -> int:
        """2 when a pod was bad input (the webhook would refuse it), else 1 when a pod fits nowhere, else 0."""
        if self.invalid:
            return EXIT_BAD_INPUT
        if any(r["node"] is None for r in self.results.values()):
            return EXIT_UNSCHEDULABLE
        return EXIT_OK

    def _place_member(self, pod: PodRequest) -> None:
        decision = self.planner.schedule(pod, now=self.clock)
        if isinstance(decision, (Refuse, Wait)):
            self._record(pod.key, None, decision.reason)
        elif isinstance(decision, Bind):
            for m in decision.members:
                self._record_member(m)

    def _record_member(self, m: MemberPlacement) -> None:
        pod = self.state.pods[m.pod].pod  # the member is bound in the state: its request is there
        self._record(m.pod, m.node, annotations=self._annotate(pod, m.allocation, list(m.visible_gpus)))

    def finish(self) -> list[dict[str, Any]]:
        """Gangs that never reached their quorum release what they held; their members stay unplaced."""
        self.planner.expire(math.inf)
        return [self.results[k] for k in self.order]


def _devices(annotations: dict[str, str]) -> str:
    """``container: gpu 0 (30%, 6 GiB), ...`` from the canonical annotation."""
    from devshare.model.codecs import decode_allocation
    from devshare.model.quantity import human_bytes

    alloc = decode_allocation(annotations)
    if alloc is None:
        return ""
    parts = []
    for c in alloc.containers:
        grants = []
        for g in c.devices:
            share = f"{g.core_milli / 10:g}%" + (f", {human_bytes(g.memory)}" if g.memory else "")
            grants.append(f"{g.type} {g.minor} ({share})")
        parts.append(f"{c.name}: " + (", ".join(grants) or "-"))
    return "; ".join(parts)


def _table(data: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table()
    for col in ("pod", "node", "devices / reason"):
        table.add_column(col, overflow="fold")
    for p in data["placements"]:
        if p["node"] is None:
            table.add_row(p["pod"], "-", f"[red]{p['reason']}[/red]")
            continue
        table.add_row(p["pod"], p["node"], _devices(p["annotations"]))
    table_console().print(table)


def schedule(
    pods: Annotated[Path, typer.Argument(help="Multi-document YAML of the Pods to place, in order.")],
    cluster: Annotated[Path, typer.Option(help="Multi-document YAML of Node, Device and (bound) Pod objects.")],
    output: Annotated[str, typer.Option("--output", "-o", help="json, yaml or table.")] = "json",
    policy: Annotated[str | None, typer.Option(help="Node policy: devshare (default), binpack or spread "
                                               "(overrides the --config file's scheduling.nodePolicy).")] = None,
    config: ConfigOption = None,
) -> None:
    """Place the pods of PODS.yaml in order on the cluster of --cluster, and print for each pod the
    node (or null and why not) and every annotation devshare would write.

    Exit code: 0 every pod placed; 1 some pods fit nowhere; 2 a pod is invalid (the webhook would
    refuse it) or the input is bad. Every placement is printed in each case."""
    with user_errors():
        if output not in ("json", "yaml", "table"):
            raise fail(f"unknown output format {output!r}: use json, yaml or table")
        from devshare.cli.snapshot import load_state

        if policy is not None and policy not in LIVE_NAMES:
            raise fail(f"unknown policy {policy!r}: use one of {', '.join(LIVE_NAMES)}")
        engine = build_engine(with_overrides(load_config(config), policy=policy))
        pod_objs = pods_of(pods)
        backend, dra_objects = load_cluster_with_dra(cluster)
        asyncio.run(load_state(backend, engine.lifecycle))
        placer = Placer(engine, dra_objects=dra_objects)
        for obj in pod_objs:
            placer.place(obj)
        emit({"placements": placer.finish()}, output, _table)
    raise typer.Exit(placer.exit_code())


def load_cluster_with_dra(path: Path) -> tuple[Any, list[tuple[str, Any]]]:
    """The cluster file's Node, Device and Pod objects as a backend, and its DRA objects (issue 38) apart."""
    docs = load_documents(path)
    dra_objects: list[tuple[str, Any]] = []
    rest: list[Any] = []
    for i, doc in enumerate(docs, start=1):
        items = doc.get("items") or [] if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for j, obj in enumerate(items):
            where = f"{path}, document {i}" + (f", items[{j}]" if len(items) > 1 else "")
            (dra_objects if isinstance(obj, dict) and obj.get("kind") in DRA_KINDS else rest).append(
                (where, obj) if isinstance(obj, dict) and obj.get("kind") in DRA_KINDS else obj)
    if not dra_objects:
        return load_cluster(path), []
    from devshare.kube.memory import MemoryBackend

    if not rest:
        raise InvalidInput("no Node, Device or Pod object in the file", field=str(path))
    return MemoryBackend.from_objects(rest, source=str(path)), dra_objects


def register(app: typer.Typer) -> None:
    app.command("schedule", short_help="Place pods on a cluster file: where and why.")(schedule)
