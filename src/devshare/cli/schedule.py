"""``devshare schedule --cluster FILE PODS.yaml``: place pods in order, print where and why."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from devshare.cli.common import ConfigOption, emit, fail, load_cluster, load_yaml_documents, user_errors
from devshare.config import load_config, refuse_disabled, refuse_pod, with_overrides
from devshare.engine.groups import Bind, GroupPlanner, MemberPlacement, Refuse, Wait
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies import LIVE_NAMES
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.errors import InvalidInput
from devshare.model.pod import parse_pod
from devshare.model.request import PodRequest


def pods_of(path: Path) -> list[dict[str, Any]]:
    """The Pod objects of a multi-document YAML (``kind: List`` documents are flattened)."""
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(load_yaml_documents(path)):
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

    def __init__(self, state: ClusterState, scheduler: Scheduler, disabled: frozenset[str] = frozenset(),
                 disabled_dialects: frozenset[str] = frozenset()) -> None:
        self.state = state
        self.disabled = disabled  # device types the configuration switches off
        self.disabled_dialects = disabled_dialects  # and dialects (dialects.mgpu: false is MGPUEnable: false)
        self.scheduler = scheduler
        self.lifecycle = Lifecycle(scheduler)
        self.planner = GroupPlanner(scheduler, lifecycle=self.lifecycle)
        self.results: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.clock = 0.0
        self.now_ns = time.time_ns()

    def _record(self, key: str, node: str | None, reason: str = "",
                annotations: dict[str, str] | None = None) -> None:
        if key not in self.results:
            self.order.append(key)
        entry: dict[str, Any] = {"pod": key, "node": node}
        if node is None:
            entry["reason"] = reason
        entry["annotations"] = annotations or {}
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
            self._record(key, None, str(e))
            return
        refused = (refuse_disabled([d.type for c in pod.containers for d in c.devices], self.disabled)
                   or refuse_pod(obj, disabled_dialects=self.disabled_dialects,
                                 device_types=frozenset(self.state.tables)))
        if refused:
            self._record(key, None, refused)
            return
        if key in self.state.pods:
            self._record(key, None, f"pod {key} already holds devices on {self.state.pods[key].allocation.node}")
            return
        if pod.group is not None:
            self.lifecycle.arrived(pod)
            self._place_member(pod)
            return
        # kube-scheduler asks the extender about every pod of devshare's profile, asking for a device or not
        placed = self.lifecycle.schedule(pod, now=self.clock)
        if placed is None:
            self._record(key, None, self.scheduler.why_unschedulable(pod))
            return
        self._record(key, placed.node, annotations=self._annotate(pod, placed.allocation))

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
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for col in ("pod", "node", "devices / reason"):
        table.add_column(col, overflow="fold")
    for p in data["placements"]:
        if p["node"] is None:
            table.add_row(p["pod"], "-", f"[red]{p['reason']}[/red]")
            continue
        table.add_row(p["pod"], p["node"], _devices(p["annotations"]))
    Console().print(table)


def schedule(
    pods: Annotated[Path, typer.Argument(help="Multi-document YAML of the Pods to place, in order.")],
    cluster: Annotated[Path, typer.Option(help="Multi-document YAML of Node, Device and (bound) Pod objects.")],
    output: Annotated[str, typer.Option("--output", "-o", help="json, yaml or table.")] = "json",
    policy: Annotated[str | None, typer.Option(help="Node policy: devshare (default), binpack or spread "
                                               "(overrides the --config file's scheduling.nodePolicy).")] = None,
    config: ConfigOption = None,
) -> None:
    """Place the pods of PODS.yaml in order on the cluster of --cluster, and print for each pod the
    node (or null and why not) and every annotation devshare would write."""
    with user_errors():
        if output not in ("json", "yaml", "table"):
            raise fail(f"unknown output format {output!r}: use json, yaml or table")
        from devshare.kube.snapshot import load_state

        if policy is not None and policy not in LIVE_NAMES:
            raise fail(f"unknown policy {policy!r}: use one of {', '.join(LIVE_NAMES)}")
        cfg = with_overrides(load_config(config), policy=policy)
        cfg.register()
        pod_objs = pods_of(pods)
        state = asyncio.run(load_state(load_cluster(cluster), state=cfg.state()))
        placer = Placer(state, Scheduler(state, policy=cfg.policy(), settings=cfg.settings(),
                                         quotas=cfg.namespace_quotas()),
                        disabled=cfg.device_types.disabled(), disabled_dialects=cfg.disabled_dialects())
        for obj in pod_objs:
            placer.place(obj)
        emit({"placements": placer.finish()}, output, _table)


def register(app: typer.Typer) -> None:
    app.command("schedule")(schedule)
