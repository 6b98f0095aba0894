"""How far one /filter walks through devshare's source: from the HTTP route's handler to the card choice.

Issue 35 asks that a newcomer can follow a /filter: this counts, with ``sys.setprofile``, the Python
frames of ``src/devshare`` that run between the moment the aiohttp route handler of ``/filter`` is
entered and the moment the card choice (the share handler's ``choose``/``_choose``: which cards of a
node a container gets) first returns:

- files: the distinct source files of ``src/devshare`` with a frame in that window;
- depth: how many ``src/devshare`` frames deep the card choice runs, the handler's frame being 1
  (``all_frames_depth``: every frame between them counted, the libraries' too);
- re-entries: how many times the frame running moves into a file that it had been in and left
  before (by a call or by a return; ``returns_to_a_file_left``: by a return only); and the most any
  one file is re-entered. A return from a callee counts: an orchestrator that calls three helpers in
  turn is re-entered three times;
- left and called again (``left_and_called_again``, ``most_called_again``): calls into a file that
  had been entered before and had no frame running any more (left for good: every frame of it had
  returned), the ping-pong of a path that comes back to a module it had finished with.

"The frame running" is the innermost ``src/devshare`` frame: calls into aiohttp, msgspec or numpy
stay in the file that called them. The extender runs in-process on a memory backend of ``--nodes``
nodes of 8 GPUs, with the pods pending in its watch (as kube-scheduler's pods are); ``--warm``
filters of other pods of the same shape (30% compute and 6 GiB: the caches of a first request, the
node table, the policy's model learning the task mix), each followed by its bind, run before the one
measured (which then re-evaluates the node the last bind changed, as kube-scheduler's next pod
does). The extender's route handler is found by its file: the first frame of
``server/extender/app.py`` (or ``http.py``) entered once the request was sent.

    .venv/bin/python bench/walk_filter.py [--nodes 100] [--warm 20] [--files]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

SRC = str(Path(__file__).resolve().parents[1] / "src" / "devshare") + "/"
HANDLER_FILES = ("server/extender/app.py", "server/extender/http.py")
CHOICE = {"choose", "_choose"}
CHOICE_FILE = "engine/handlers/share.py"


def _ours(frame: FrameType | None) -> FrameType | None:
    while frame is not None and not frame.f_code.co_filename.startswith(SRC):
        frame = frame.f_back
    return frame


class Walk:
    def __init__(self) -> None:
        self.on = False
        self.done = False
        self.current: str | None = None
        self.seen: set[str] = set()
        self.files: list[str] = []
        self.reentries: Counter[str] = Counter()
        self.active: Counter[str] = Counter()  # frames of each file running now (on the stack)
        self.called_again: Counter[str] = Counter()  # calls into a file none of whose frames runs any more
        self.returns = 0  # re-entries by a return (back into a file left by a call)
        self.depth = 0
        self.all_depth = 0  # every frame, aiohttp's, msgspec's and the event loop's between ours included
        self.handler: FrameType | None = None

    def _move(self, file: str | None, *, by_return: bool = False) -> None:
        if file is None or file == self.current:
            return
        if file in self.seen:
            self.reentries[file] += 1
            self.returns += by_return
        else:
            self.seen.add(file)
            self.files.append(file)
        self.current = file

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.done or event not in ("call", "return"):
            return
        file = frame.f_code.co_filename
        if not self.on:
            if event == "call" and file.startswith(SRC) and file[len(SRC):] in HANDLER_FILES:
                self.on, self.handler = True, frame
                self.active[file[len(SRC):]] += 1
                self._move(file[len(SRC):])
            return
        if event == "call":
            if file.startswith(SRC):
                rel = file[len(SRC):]
                if rel in self.seen and not self.active[rel]:
                    self.called_again[rel] += 1
                self.active[rel] += 1
                self._move(rel)
            return
        if file.startswith(SRC) and self.active[file[len(SRC):]]:
            self.active[file[len(SRC):]] -= 1
        # a return: the frame running is the innermost of ours below this one
        if file.startswith(SRC) and frame.f_code.co_name in CHOICE and file[len(SRC):] == CHOICE_FILE:
            depth, f = 0, _ours(frame)
            while f is not None:
                depth += 1
                if f is self.handler:
                    break
                f = _ours(f.f_back)
            self.depth = depth
            all_depth, g = 0, frame
            while g is not None:
                all_depth += 1
                if g is self.handler:
                    break
                g = g.f_back
            self.all_depth = all_depth
            self.done = True
            return
        below = _ours(frame.f_back)
        if file.startswith(SRC) and below is not None:
            self._move(below.f_code.co_filename[len(SRC):], by_return=True)


def pods(n: int) -> list[dict[str, Any]]:
    from devshare.server.webhook.mutate import DEFAULT_SCHEDULER

    out = []
    for i in range(n):
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"walk-{i}", "namespace": "default", "uid": f"uid-walk-{i}"},
                    "spec": {"schedulerName": DEFAULT_SCHEDULER, "containers": [
                        {"name": "main", "image": "x", "resources": {"limits": {
                            "koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "6Gi"}}}]}})
    return out


async def measure(nodes: int, warm: int = 20) -> Walk:
    from devshare.server.extender.serve import build_app
    from support.extender import cluster

    backend = cluster(nodes, gpus=8)
    app = build_app(backend)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        for _ in range(1000):
            if (await client.get("/readyz")).status == 200:
                break
            await asyncio.sleep(0.01)
        for p in pods(warm + 1):  # created once the extender follows the cluster: its watch delivers them
            backend.apply(p)
        await asyncio.sleep(0.5)
        names = [f"node-{i}" for i in range(nodes)]
        walk = Walk()
        for i in range(warm + 1):
            pod = await backend.get_pod("default", f"walk-{i}")
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
            if i == warm:
                sys.setprofile(walk)
            try:
                r = await client.post("/filter", data=body, headers={"Content-Type": "application/json"})
            finally:
                sys.setprofile(None)
            assert r.status == 200, await r.text()
            answer = await r.json()
            assert answer.get("NodeNames"), answer
            if i < warm:  # kube-scheduler's cycle: the pod is bound, the next filter sees its node changed
                bind = {"PodName": f"walk-{i}", "PodNamespace": "default", "PodUID": f"uid-walk-{i}",
                        "Node": answer["NodeNames"][0]}
                r = await client.post("/bind", json=bind)
                assert r.status == 200 and not (await r.json()).get("Error"), await r.text()
        return walk
    finally:
        await client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--warm", type=int, default=20, help="filters before the one measured")
    ap.add_argument("--files", action="store_true", help="list the files in the order first entered")
    args = ap.parse_args()
    walk = asyncio.run(measure(args.nodes, args.warm))
    if not walk.done:
        sys.exit("the card choice was never reached: is the handler or the choice named differently now?")
    out = {"files": len(walk.files), "depth": walk.depth, "all_frames_depth": walk.all_depth,
           "reentries": sum(walk.reentries.values()), "returns_to_a_file_left": walk.returns,
           "most_reentered": walk.reentries.most_common(3),
           "left_and_called_again": sum(walk.called_again.values()),
           "most_called_again": walk.called_again.most_common(3)}
    if args.files:
        out["walk"] = walk.files
    print(json.dumps(out, indent=1 if args.files else None))


if __name__ == "__main__":
    main()
