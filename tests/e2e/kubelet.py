"""kubelet's device manager as a test's client: the ``kubelet-harness`` binary (built by
``build-binaries.sh`` from k8s.io/kubernetes/pkg/kubelet/cm/devicemanager, ``kubelet-harness/main.go``)
run as a subprocess, one JSON command a line on its stdin, one answer a line on its stdout.

The harness owns ``<root>/device-plugins`` (its ``kubelet.sock``, the plugin sockets, the real
``kubelet_internal_checkpoint``) and ``<root>/harness-state.json`` (the pods it admitted, for a
restart). :meth:`Kubelet.admit` admits a pod as kubelet does (init containers, then the others; per
container each device-plugin resource of its limits: GetPreferredAllocation when offered, Allocate,
the checkpoint written) and answers what each container would get: the device ids kubelet recorded
and the runtime options (envs, mounts, device files, annotations, CDI devices).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

HARNESS = "kubelet-harness"
CHECKPOINT = "kubelet_internal_checkpoint"


class HarnessError(RuntimeError):
    """The harness answered ok: false, died, or did not answer in time."""


class Kubelet:
    """One kubelet device manager over ``root``; :meth:`restart` keeps its checkpoint and pods."""

    def __init__(self, binary: Path, root: Path) -> None:
        if not binary.is_file():
            raise HarnessError(f"{binary} is missing: tests/e2e/build-binaries.sh builds it (DEVSHARE_E2E_BIN must "
                               "hold it too)")
        self.binary = binary
        self.root = root
        self.plugin_dir = root / "device-plugins"
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.log = root / "kubelet-harness.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.ready: dict[str, Any] = {}
        self.starts = 0

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / CHECKPOINT

    # ------------------------------------------------------------------ process
    def start(self, timeout: float = 30) -> dict[str, Any]:
        """Start the harness; returns its ready line (``restored``: the pods it admitted again)."""
        err = self.log.open("ab")
        self.proc = subprocess.Popen([str(self.binary), "--plugin-dir", str(self.plugin_dir), "-v", "4"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                     start_new_session=True)
        err.close()
        self._answers = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self._answers), daemon=True).start()
        self.starts += 1
        self.ready = self._answer(timeout)
        return self.ready

    @staticmethod
    def _read(proc: subprocess.Popen[bytes], answers: queue.Queue[dict[str, Any] | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            answers.put(json.loads(line))
        answers.put(None)

    def _answer(self, timeout: float) -> dict[str, Any]:
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise HarnessError(f"kubelet-harness did not answer within {timeout:.0f}s:\n{self.tail()}") from None
        if answer is None:
            raise HarnessError(f"kubelet-harness exited:\n{self.tail()}")
        if not answer.get("ok"):
            raise HarnessError(f"kubelet-harness: {answer.get('error')}")
        return answer

    def stop(self, *, kill: bool = False) -> None:
        """Stop it as kubelet stops (SIGTERM: the registration server closes), or kill it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def restart(self, *, kill: bool = False) -> dict[str, Any]:
        self.stop(kill=kill)
        return self.start()

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    # ------------------------------------------------------------------ commands
    def call(self, op: str, timeout: float = 120, **args: Any) -> dict[str, Any]:
        if self.proc is None or self.proc.stdin is None:
            raise HarnessError("kubelet-harness is not running")
        self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    def admit(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Admit ``pod`` (as the API serves it): ``{"admitted", "reason", "message", "containers"}``."""
        return self.call("admit", pod=pod)

    def start_container(self, uid: str, container: str) -> dict[str, Any]:
        """What a (re)started container gets, from the device manager's cache (its checkpoint)."""
        return self.call("start", uid=uid, container=container)["container"]  # type: ignore[no-any-return]

    def remove(self, uid: str) -> None:
        self.call("remove", uid=uid)

    def capacity(self) -> dict[str, Any]:
        return self.call("capacity")

    def pods(self) -> list[dict[str, Any]]:
        return self.call("pods")["pods"]  # type: ignore[no-any-return]

    def wait_allocatable(self, want: dict[str, int], timeout: float = 60) -> dict[str, str]:
        """Wait until every resource of ``want`` is allocatable in that amount (the plugins registered
        and listed their devices)."""
        deadline = time.monotonic() + timeout
        alloc: dict[str, str] = {}
        while time.monotonic() < deadline:
            alloc = self.capacity()["allocatable"]
            if all(alloc.get(k) == str(v) for k, v in want.items()):
                return alloc
            time.sleep(0.2)
        raise HarnessError(f"allocatable is {alloc}, want {want}:\n{self.tail()}")


# ---------------------------------------------------------------------------------------------------
class NodeSide:
    """One node's node side: devshare's agent (``devshare agent run``, with the identity of
    deploy/agent's ServiceAccount bound to the node, a fake GPU description whose cards are the ones
    the test's Device object names) and kubelet's device manager (:class:`Kubelet`), over one
    device plugin directory. Pods are made and scheduled through the real control plane."""

    def __init__(self, cluster: Any, root: Path, node: str, *, gpus: int = 2, memory_gib: int = 16,
                 labels: dict[str, str] | None = None, rdma: int = 0, resources: list[str] | None = None) -> None:
        import yaml

        from e2e.cluster import binaries

        self.cluster = cluster
        self.node = node  # Nodes are cluster-wide and tests share the control plane: a name no other test uses
        taken = cluster.cp.kubectl("get", "node", node, "--ignore-not-found", "-o", "name").stdout.strip()
        if taken:
            raise AssertionError(f"node {node} exists already: another test uses that name")
        self.root = root
        cluster.node(node, gpus=gpus, memory_gib=memory_gib, labels=labels, rdma=rdma)
        fake: dict[str, Any] = {"model": "Tesla-T4", "memory": f"{memory_gib}Gi",
                                "gpus": [{"minor": i, "uuid": self.uuid(i)} for i in range(gpus)]}
        if rdma:
            fake["rdma"] = [{"id": f"mlx5_{i}", "minor": i, "paths": [f"/dev/infiniband/uverbs{i}"]}
                            for i in range(rdma)]
        self.fake = root / "node.yaml"
        self.fake.write_text(yaml.safe_dump(fake))
        self.resources = resources
        self.kubelet = Kubelet(binaries() / HARNESS, root)
        self.journal = root / "agent-checkpoint.json"
        self.agent: Any = None

    def uuid(self, minor: int) -> str:
        return f"GPU-{self.node}-{minor}"  # what tests/e2e/conftest.py's Device objects name

    # ------------------------------------------------------------------ the agent
    def start_agent(self, extra: list[str] | None = None) -> Any:
        from e2e.cluster import DEVSHARE

        cfg = self.cluster.cp.token_kubeconfig("devshare-agent", on_node=self.node)
        extra = list(extra or ["--metrics-port", "0"])
        if self.resources:
            extra += ["--resources", ",".join(self.resources)]
        # no --checkpoint: the default is kubelet's, in the plugin directory (deploy/agent passes the same)
        self.agent = self.cluster.cp.spawn(f"agent-{self.node}", [
            *DEVSHARE, "agent", "run", "--fake", str(self.fake), "--node", self.node,
            "--plugin-dir", str(self.kubelet.plugin_dir), "--agent-checkpoint", str(self.journal),
            "--interval", "1", *extra],
            env={**os.environ, "KUBECONFIG": str(cfg), "PYTHONUNBUFFERED": "1"})
        return self.agent

    def start(self, want: dict[str, int], *, agent_args: list[str] | None = None) -> None:
        """kubelet, then the agent; until kubelet shows ``want`` allocatable (the plugins registered)."""
        self.kubelet.start()
        self.start_agent(agent_args)
        self.wait_registered(want)

    def stop_agent(self) -> None:
        if self.agent is not None:
            self.agent.stop()

    def close(self) -> None:
        self.stop_agent()
        self.kubelet.stop()

    def wait_registered(self, want: dict[str, int], timeout: float = 90) -> None:
        try:
            self.kubelet.wait_allocatable(want, timeout=timeout)
        except HarnessError as e:
            raise HarnessError(f"{e}\n--- agent ---\n{self.agent_log()}") from None

    # ------------------------------------------------------------------ pods
    def admit(self, name: str) -> dict[str, Any]:
        """kubelet admits the pod as the API serves it now; then, as kubelet would, its phase becomes
        Running (admitted) or Failed (refused)."""
        pod = self.cluster.get_pod(name)
        result = self.kubelet.admit(pod)
        result["uid"] = pod["metadata"]["uid"]
        self.cluster.set_phase(name, "Running" if result["admitted"] else "Failed")
        return result

    def settle(self, names: list[str], timeout: float = 60) -> dict[str, dict[str, Any]]:
        """Wait until every pod is marked assigned and the agent owes nothing (no handout unresolved,
        no trade unwritten); the pods as the API serves them then."""
        from e2e.cluster import wait_until

        def done() -> dict[str, dict[str, Any]] | None:
            pods = {n: self.cluster.get_pod(n) for n in names}
            if any(p["metadata"]["annotations"].get("devshare.io/assigned") != "true" for p in pods.values()):
                return None
            if self.journal.exists():
                state = json.loads(self.journal.read_text())
                if state.get("handouts") or [w for w in state.get("writes", []) if w.get("why") != "assigned"]:
                    return None
            return pods
        try:
            out: dict[str, dict[str, Any]] = wait_until(done, timeout=timeout, interval=0.3,
                                                        what="every pod assigned, nothing owed")
        except TimeoutError as e:
            unmarked = [n for n in names
                        if self.cluster.get_pod(n)["metadata"]["annotations"].get("devshare.io/assigned") != "true"]
            raise AssertionError(f"{e}; not assigned: {unmarked}\n--- agent ---\n{self.agent_log()}") from None
        return out

    def agent_log(self, n: int = 60) -> str:
        """The agent's log without its HTTP client's request lines."""
        if self.agent is None:
            return ""
        lines = [line for line in self.agent.log.read_text(errors="replace").splitlines() if " httpx" not in line]
        return "\n".join(lines[-n:])


def promised_envs(pod: dict[str, Any], container: str, uuid: Any, card_memory: int) -> dict[str, str]:
    """What docs/agent.md ("What a container gets") promises ``container`` of ``pod`` (as the API
    serves it now), from its final ``devshare.io/allocation``: ``uuid(minor)`` names a card."""
    alloc = json.loads(pod["metadata"]["annotations"]["devshare.io/allocation"])
    grants = next(c["devices"] for c in alloc["containers"] if c["name"] == container)
    gpus = [g for g in grants if g["type"] == "gpu"]
    envs: dict[str, str] = {}
    if gpus:
        envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(uuid(g["minor"]) for g in gpus)

        def memory(g: dict[str, Any]) -> int:
            return int(g.get("memory") or card_memory * (g.get("memoryRatio") or g["core"]) // 100)
        if any(g["core"] < 100 or memory(g) < card_memory for g in gpus):
            envs["DEVSHARE_GPU_MEMORY_LIMIT"] = ",".join(str(memory(g)) for g in gpus)
            envs["DEVSHARE_GPU_CORE_LIMIT"] = ",".join(f"{g['core']:g}" for g in gpus)
            for i, g in enumerate(gpus):
                envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{memory(g) // 2**20}m"
            envs["CUDA_DEVICE_SM_LIMIT"] = str(int(max(g["core"] for g in gpus)))
    spec = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    limits = next(c for c in spec if c["name"] == container).get("resources", {}).get("limits", {})
    if "aliyun.com/gpu-mem" in limits:
        from devshare.model.quantity import quantity_int  # the API server spells 1000 as 1k

        envs["ALIYUN_COM_GPU_MEM_IDX"] = ",".join(str(g["minor"]) for g in gpus)
        envs["ALIYUN_COM_GPU_MEM_POD"] = str(sum(quantity_int(c.get("resources", {}).get("limits", {}).get(
            "aliyun.com/gpu-mem", 0)) for c in pod["spec"]["containers"]))
        envs["ALIYUN_COM_GPU_MEM_CONTAINER"] = str(quantity_int(limits["aliyun.com/gpu-mem"]))
        envs["ALIYUN_COM_GPU_MEM_DEV"] = str(card_memory // 2**20)
    rdma = [g for g in grants if g["type"] == "rdma"]
    if rdma:
        envs["DEVSHARE_RDMA_DEVICES"] = ",".join(g["id"] for g in rdma)
    return envs


def check_containers(side: NodeSide, names: list[str], results: dict[str, dict[str, Any]], *,
                     card_memory: int) -> dict[str, dict[str, Any]]:
    """Once every pod is settled: each container got exactly what its pod's final annotation records,
    as docs/agent.md promises (the whole environment from the plugins, nothing else), and the device
    ids kubelet recorded for it are of those devices (GetPreferredAllocation). Returns the pods."""
    pods = side.settle(names)
    for name in names:
        assert results[name]["admitted"], results[name]
        pod = pods[name]
        alloc = {c["name"]: c["devices"] for c in
                 json.loads(pod["metadata"]["annotations"]["devshare.io/allocation"])["containers"]}
        for c in results[name]["containers"]:
            want = promised_envs(pod, c["name"], side.uuid, card_memory) if alloc.get(c["name"]) else {}
            assert c["envs"] == want, (name, c["name"])
            for resource, ids in c["devices"].items():
                kind = next((t for t in ("rdma", "fpga") if resource.endswith("/" + t)), "gpu")
                held = {d["minor"] for d in alloc.get(c["name"], []) if d["type"] == kind}
                recorded = {_minor(i, kind) for i in ids}
                assert recorded == held, (name, c["name"], resource, ids)
    return pods


def _minor(device_id: str, kind: str) -> int:
    """The device a plugin's id stands for: ``<minor>-<k>`` and ``rdma<minor>-<k>`` (shares), a GPU's
    UUID (``GPU-<node>-<minor>`` here), an RDMA device's id (``mlx5_<minor>`` here)."""
    if device_id.startswith("GPU-"):
        return int(device_id.rsplit("-", 1)[1])
    if device_id.startswith("mlx5_"):
        return int(device_id.split("_")[1])
    return int(device_id.split("-")[0].removeprefix(kind))
