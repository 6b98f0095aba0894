"""Fixtures of the end-to-end suite: one real control plane for the session, devshare installed
from deploy/, and builders for the Nodes, Devices and Pods a test needs.

Each test gets its own nodes, labelled ``e2e.devshare.io/group=<group>``, and pods select them with a
nodeSelector, so tests sharing the control plane never see each other's capacity.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import SCHEDULER_NAME, ControlPlane, control_plane, wait_until

GROUP_LABEL = "e2e.devshare.io/group"
GiB = 2**30
_ids = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cp() -> Iterator[ControlPlane]:
    """The real control plane with devshare installed: extender, kube-scheduler and webhook running."""
    keep = os.environ.get("DEVSHARE_E2E_KEEP")
    root = Path(tempfile.mkdtemp(prefix="devshare-e2e-"))
    with control_plane(root) as plane:
        plane.install()
        plane.start_extender()
        plane.start_scheduler()
        plane.start_webhook()
        try:
            yield plane
        except BaseException:
            print(plane.logs())
            raise
    if not keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


class Cluster:
    """Builders over the control plane for one test: its nodes, devices, namespace and pods."""

    def __init__(self, cp: ControlPlane, group: str) -> None:
        self.cp = cp
        self.group = group
        self.ns = cp.namespace(f"e2e-{group}")

    # --- nodes and devices -------------------------------------------------------------------------
    def node_objects(self, name: str, *, gpus: int = 4, memory_gib: int = 16, labels: dict[str, str] | None = None,
                     cpu: str = "64", memory: str = "256Gi", rdma: int = 0, fpga: int = 0,
                     matrix: list[list[float]] | None = None) -> list[dict[str, Any]]:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {GROUP_LABEL: self.group, "kubernetes.io/hostname": name,
                                                      **(labels or {})}},
                "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                           "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "message": "e2e", "lastHeartbeatTime": _now(),
                                           "lastTransitionTime": _now()}]}}
        devices: list[dict[str, Any]] = [
            {"type": "gpu", "minor": i, "id": f"GPU-{name}-{i}", "health": True,
             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": f"{memory_gib}Gi",
                           "koordinator.sh/gpu-memory-ratio": "100"}} for i in range(gpus)]
        devices += [{"type": "rdma", "minor": i, "id": f"mlx5_{i}", "health": True,
                     "resources": {"koordinator.sh/rdma": "100"}} for i in range(rdma)]
        devices += [{"type": "fpga", "minor": i, "id": f"fpga-{name}-{i}", "health": True,
                     "resources": {"koordinator.sh/fpga": "100"}} for i in range(fpga)]
        spec: dict[str, Any] = {"devices": devices}
        if matrix is not None:
            spec["topologies"] = {"gpu": [{"name": "bandwidth", "topology": json.dumps(matrix)}]}
        device = {"apiVersion": "devshare.io/v1alpha1", "kind": "Device",
                  "metadata": {"name": name, "labels": {GROUP_LABEL: self.group}}, "spec": spec}
        return [node, device]

    def nodes(self, names: list[str], **kw: Any) -> None:
        """Create the nodes (a Node's create keeps its status: no kubelet needs to write it) and their
        Devices, in one kubectl call."""
        objs = [o for n in names for o in self.node_objects(n, **kw)]
        self.cp.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}),
                        timeout=600)

    def delete_nodes(self) -> None:
        """Delete this test's Nodes and Devices (one collection delete each)."""
        for kind in ("nodes", "devices"):
            self.cp.kubectl("delete", kind, "-l", f"{GROUP_LABEL}={self.group}", "--wait=false", timeout=300)

    def node(self, name: str, **kw: Any) -> str:
        self.nodes([name], **kw)
        return name

    # --- pods --------------------------------------------------------------------------------------
    def pod(self, name: str, containers: list[dict[str, str]] | dict[str, str] | None = None, *,
            annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            scheduler: str | None = SCHEDULER_NAME, priority_class: str | None = None,
            node_selector: bool = True, create: bool = True, names: list[str] | None = None) -> dict[str, Any]:
        """A pod whose containers ask for ``containers`` (resource name -> quantity, as limits)."""
        asks = containers if isinstance(containers, list) else [containers or {}]
        spec: dict[str, Any] = {
            "containers": [{"name": (names[i] if names else f"c{i}"), "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": dict(a)} if a else {}} for i, a in enumerate(asks)],
            "terminationGracePeriodSeconds": 0,
        }
        if scheduler:
            spec["schedulerName"] = scheduler
        if node_selector:
            spec["nodeSelector"] = {GROUP_LABEL: self.group}
        if priority_class:
            spec["priorityClassName"] = priority_class
        obj = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": self.ns, "annotations": dict(annotations or {}),
                            "labels": dict(labels or {})},
               "spec": spec}
        if create:
            self.cp.kubectl("create", "-f", "-", input=json.dumps(obj))
        return obj

    def get_pod(self, name: str) -> dict[str, Any]:
        return self.cp.get("pod", name, "-n", self.ns)  # type: ignore[no-any-return]

    def pods(self) -> list[dict[str, Any]]:
        return self.cp.get("pods", "-n", self.ns)["items"]  # type: ignore[no-any-return]

    def wait_bound(self, name: str, timeout: float = 30) -> dict[str, Any]:
        def bound() -> dict[str, Any] | None:
            p = self.get_pod(name)
            return p if p["spec"].get("nodeName") else None
        pod: dict[str, Any] = wait_until(bound, timeout=timeout, interval=0.2, what=f"pod {self.ns}/{name} bound")
        return pod

    def events(self, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        items = self.cp.get("events", "-n", self.ns, "--field-selector", f"involvedObject.name={name}")["items"]
        return [e for e in items if reason is None or e.get("reason") == reason]

    def wait_event(self, name: str, reason: str, timeout: float = 30) -> dict[str, Any]:
        ev: dict[str, Any] = wait_until(lambda: (self.events(name, reason) or [None])[-1], timeout=timeout,
                                        interval=0.3, what=f"{reason} event of {self.ns}/{name}")
        return ev

    def delete_pod(self, name: str) -> None:
        self.cp.kubectl("delete", "pod", name, "-n", self.ns, "--grace-period=0", "--force", "--wait=false")

    def set_phase(self, name: str, phase: str) -> None:
        self.cp.write_status("pod", name, {"phase": phase}, namespace=self.ns)

    def inspect(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.cp.extender_port}/inspect", timeout=10) as r:
            data: dict[str, Any] = json.load(r)
        mine = {o["metadata"]["name"] for o in self.cp.get("nodes", "-l", f"{GROUP_LABEL}={self.group}")["items"]}
        data["nodes"] = [n for n in data["nodes"] if n["name"] in mine]
        return data


def allocation(pod: dict[str, Any]) -> dict[str, Any]:
    return json.loads(pod["metadata"]["annotations"]["devshare.io/allocation"])  # type: ignore[no-any-return]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@pytest.fixture
def cluster(cp: ControlPlane, request: pytest.FixtureRequest) -> Cluster:
    """Builders for this test, under a group name unique in the session."""
    base = request.node.name.replace("test_", "").replace("_", "-").lower()[:30].strip("-")
    return Cluster(cp, f"{base}-{next(_ids)}")
