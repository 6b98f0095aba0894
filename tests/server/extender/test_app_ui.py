"""The /ui occupancy page in a real browser: Debian's headless Chromium driven by Playwright.

The extender runs as a process on a cluster file and a configuration with quotas; the page must show
every node and card, who holds what and how much is stranded, what the holders really use (the
agent's usage on the Device), the queue (a pending pod, and a pod the filter refused, with why), the
active policy and configuration, the quotas by namespace, the allocation history and the legend, and
follow a bind without a reload. A screenshot is saved and its pixels checked (size, not blank, the
page's colours where the data says they must be, every new part laid out inside the page).

Skips only when no chromium binary is installed (`apt-get install -y chromium`; `.ci/run` installs
it). Playwright itself is a test dependency; its own browser download is not used.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from support import REPO

ROOT = REPO
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="Debian's chromium is not installed (apt-get install -y chromium)")

GIB = 2**30
# a pod on gpu-node-1 card 1 that takes 20% of its compute and all but 128 MiB of its 40 GiB: the
# other 80% of that card's compute can never be given (every share needs 256 MiB): stranded
STRANDING_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "memory-hog", "namespace": "team-c", "annotations": {
        "devshare.io/allocation": json.dumps({"node": "gpu-node-1", "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": 1, "id": "GPU-a100-1", "core": 20, "memory": 40 * GIB - 128 * 2**20,
             "memoryRatio": 99.69}]}]})}},
    "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "main", "image": "x", "resources": {"limits": {
        "koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory": str(40 * GIB - 128 * 2**20)}}}]},
    "status": {"phase": "Running"},
}


# a pod no node can take (8 whole GPUs: the largest node has 4): its filter is refused
GIANT = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "giant", "namespace": "team-d", "uid": "u-giant"},
         "spec": {"schedulerName": "devshare-scheduler", "containers": [
             {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
# what gpu-node-2's agent reports: the notebook uses 3 GiB of its 7.5 GiB share, at 40%
USAGE = {"at": "2026-11-28T07:40:00Z", "gpus": [{
    "minor": 0, "id": "GPU-t4-0", "memoryUsed": 3 * GIB + 2**29, "utilization": 0.4, "containers": [
        {"pod": "team-a/notebook", "container": "main", "memoryUsed": 3 * GIB, "memoryAllocated": 8053063680,
         "utilization": 0.4, "coreAllocated": 0.5},
        {"pod": "unknown/unknown", "container": "unknown", "memoryUsed": 2**29}]}]}
CONFIG = {"apiVersion": "devshare.io/v1alpha1", "kind": "DevshareConfiguration",
          "scheduling": {"nodePolicy": "binpack", "shortlist": 1},
          "quotas": {"team-a": {"gpuCore": 200, "gpuMemory": "16Gi"}, "team-b": {"gpuMemory": "32Gi"}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


@pytest.fixture
def extender(tmp_path: Path) -> Iterator[str]:
    cluster = tmp_path / "cluster.yaml"
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "cluster.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "Device" and d["metadata"]["name"] == "gpu-node-2":
            d["status"] = {"usage": USAGE}
    cluster.write_text(yaml.safe_dump_all([*docs, STRANDING_POD, GIANT]))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "devshare.cli.main", "extender", "--cluster", str(cluster),
                             "--config", str(config), "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if get(base + "/readyz").startswith(b"ok"):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("the extender never became ready")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def bind(base: str, namespace: str, name: str, node: str) -> None:
    body = json.dumps({"PodName": name, "PodNamespace": namespace, "Node": node}).encode()
    req = urllib.request.Request(base + "/bind", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read()) == {"Error": ""}


def refuse_giant(base: str) -> None:
    body = json.dumps({"Pod": GIANT, "NodeNames": ["gpu-node-1", "gpu-node-2"]}).encode()
    req = urllib.request.Request(base + "/filter", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        answer = json.loads(r.read())
    assert not answer.get("NodeNames") and answer["FailedAndUnresolvableNodes"], answer


def png_pixels(path: Path) -> np.ndarray:
    import matplotlib.image

    return np.asarray(matplotlib.image.imread(str(path)))[..., :3]  # RGB floats 0..1


def has_colour(pixels: np.ndarray, hex_rgb: str, at_least: int = 50) -> bool:
    rgb = np.array([int(hex_rgb[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    return int((np.abs(pixels - rgb).max(axis=-1) < 0.02).sum()) >= at_least


def test_occupancy_page_in_chromium(extender: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from playwright.sync_api import sync_playwright

    refuse_giant(extender)
    occupancy = json.loads(get(extender + "/ui/occupancy"))
    assert occupancy["totals"]["strandedGpus"] == pytest.approx(0.8)
    assert [p["pod"] for p in occupancy["queue"]["pods"]] == ["team-d/giant", "team-b/trainer"]
    shot = tmp_path / "ui.png"
    monkeypatch.setenv("HOME", str(tmp_path))  # chromium writes its profile and crash dumps there
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(extender + "/")  # / leads to the page
            assert page.url.endswith("/ui/")
            page.wait_for_selector('section[data-node="gpu-node-2"]', timeout=30_000)
            assert page.title() == "devshare occupancy"

            # every node and card, who holds what, and how much
            assert page.locator("section.node").count() == 2
            assert page.locator('section[data-node="gpu-node-1"] tbody tr').count() == 5  # 4 GPUs + 1 RDMA
            notebook = page.locator('section[data-node="gpu-node-2"] tr[data-device="gpu-0"]')
            assert "team-a/notebook/main" in notebook.inner_text()
            assert "50%" in notebook.inner_text() and "7.5 GiB" in notebook.inner_text()
            assert "unhealthy" in page.locator('section[data-node="gpu-node-2"] tr[data-device="gpu-1"]').inner_text()
            # the stranded card says so, on its row and on its node, and in the totals
            hog = page.locator('section[data-node="gpu-node-1"] tr[data-device="gpu-1"]')
            assert "team-c/memory-hog/main" in hog.inner_text() and "80% stranded" in hog.inner_text()
            assert "0.80 GPU stranded" in page.locator('section[data-node="gpu-node-1"] h2').inner_text()
            assert page.locator('[data-total="GPUs stranded"] b').inner_text() == "0.80"
            assert page.locator('[data-total="GPUs"] b').inner_text() == "6"

            # used against allocated: the card's reported use, and each holder's
            assert "3.5 GiB used · 40% busy" in notebook.inner_text()
            assert "uses 3 GiB" in notebook.inner_text()
            assert "unknown/unknown/unknown" in notebook.inner_text() and "holds no share" in notebook.inner_text()

            # the queue: the refused pod with its reason, the pending one
            giant = page.locator('#queue tr[data-pod="team-d/giant"]')
            assert "refused by filter" in giant.inner_text()
            assert "1 node: node has 4 gpu device(s), a container asks for 8" in giant.inner_text()
            assert "nvidia.com/gpu: 8" in giant.inner_text()
            assert "pending" in page.locator('#queue tr[data-pod="team-b/trainer"]').inner_text()
            assert page.locator('[data-total="refused"] b').inner_text() == "1"
            # the policy and configuration, the quotas, the history, the legend
            config = page.locator("#config").inner_text()
            assert "binpack" in config and "shortlist" in config and "namespaces with a quota" in config
            team_a = page.locator('#quotas tr[data-namespace="team-a"]').inner_text()
            assert "50% of 200%" in team_a and "7.5 GiB of 16 GiB" in team_a
            assert "no limit" in page.locator('#quotas tr[data-namespace="team-b"]').inner_text()
            page.wait_for_selector('#history polyline[data-series="allocatedPct"]', state="attached", timeout=30_000)
            assert page.locator('#history polyline[data-series="strandedPct"]').count() == 1
            assert "stranded" in page.locator("#history").inner_text()
            words = page.locator("#words").inner_text()
            for word in ("allocated", "unallocated", "stranded", "free", "share", "used", "idle", "unavailable",
                         "pending", "refused"):
                assert f"\n{word}" in "\n" + words, word
            boxes = {part: page.locator(part).bounding_box() for part in
                     ("#queue", "#history", "#quotas", "#config", "#words", '#history svg')}

            # live: a bind shows up without a reload
            refreshed = int(page.evaluate("Number(document.body.dataset.refreshed)"))
            bind(extender, "team-b", "trainer", "gpu-node-1")
            page.wait_for_selector("text=team-b/trainer/main", timeout=30_000)
            assert int(page.evaluate("Number(document.body.dataset.refreshed)")) > refreshed
            assert "updated" in page.locator("#status").inner_text()

            # the filter narrows the page to the nodes holding a matching pod
            page.fill("#filter", "notebook")
            page.wait_for_function("document.querySelectorAll('section.node').length === 1", timeout=30_000)
            page.fill("#filter", "")
            page.wait_for_function("document.querySelectorAll('section.node').length === 2", timeout=30_000)

            page.screenshot(path=str(shot), full_page=False)
            assert errors == []
        finally:
            browser.close()

    assert shot.stat().st_size > 20_000
    pixels = png_pixels(shot)
    assert pixels.shape[:2] == (900, 1280)
    assert pixels.std() > 0.05  # not blank
    assert has_colour(pixels[:40], "18222f", 5000)  # the header band
    assert has_colour(pixels, "3b7dd8")  # allocated compute (blue bars)
    assert has_colour(pixels, "d8663b")  # the stranded 80% (orange bar)
    for part, box in boxes.items():  # each new part is laid out, visible, inside the page's width
        assert box is not None and box["width"] > 20 and box["height"] > 4, (part, box)
        assert box["x"] >= 0 and box["x"] + box["width"] <= 1280 + 1, (part, box)
    q = boxes["#queue"]
    assert q["y"] < 900, q  # the queue is on the first screen
    queue_pixels = pixels[int(q["y"]):min(900, int(q["y"] + q["height"])), int(q["x"]):int(q["x"] + q["width"])]
    assert queue_pixels.std() > 0.02  # it drew something (text, tags), not a blank box
    assert has_colour(pixels, "b3261e", 20)  # the refusal's reason, in red
    keep = os.environ.get("DEVSHARE_UI_SCREENSHOT")
    if keep:  # e.g. DEVSHARE_UI_SCREENSHOT=ui.png to look at it
        shutil.copy(shot, keep)
