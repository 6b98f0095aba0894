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
