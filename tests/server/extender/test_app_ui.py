"""The /ui occupancy page in a real browser: Debian's headless Chromium driven by Playwright.

The extender runs as a process on a cluster file; the page must show every node and card, who holds
what and how much is stranded, and follow a bind without a reload. A screenshot is saved and its
pixels checked (size, not blank, the page's colours where the data says they must be).

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
    cluster.write_text(yaml.safe_dump_all([*docs, STRANDING_POD]))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "devshare.cli.main", "extender", "--cluster", str(cluster),
                             "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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


def png_pixels(path: Path) -> np.ndarray:
    import matplotlib.image

    return np.asarray(matplotlib.image.imread(str(path)))[..., :3]  # RGB floats 0..1


def has_colour(pixels: np.ndarray, hex_rgb: str, at_least: int = 50) -> bool:
    rgb = np.array([int(hex_rgb[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    return int((np.abs(pixels - rgb).max(axis=-1) < 0.02).sum()) >= at_least


def test_occupancy_page_in_chromium(extender: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from playwright.sync_api import sync_playwright

    occupancy = json.loads(get(extender + "/ui/occupancy"))
    assert occupancy["totals"]["strandedGpus"] == pytest.approx(0.8)
    shot = tmp_path / "ui.png"
    monkeypatch.setenv("HOME", str(tmp_path))  # chromium writes its profile and crash dumps there
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(extender + "/ui")
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

            # live: a bind shows up without a reload
            refreshed = int(page.evaluate("Number(document.body.dataset.refreshed)"))
            bind(extender, "team-b", "trainer", "gpu-node-1")
            page.wait_for_selector("text=team-b/trainer/main", timeout=30_000)
            assert int(page.evaluate("Number(document.body.dataset.refreshed)")) > refreshed
            assert "updated" in page.locator("#status").inner_text()

            # the filter narrows the page to the nodes holding a matching pod
            page.fill("#filter", "notebook")
            assert page.locator("section.node").count() == 1
            page.fill("#filter", "")
            assert page.locator("section.node").count() == 2

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
    keep = os.environ.get("DEVSHARE_UI_SCREENSHOT")
    if keep:  # e.g. DEVSHARE_UI_SCREENSHOT=ui.png to look at it
        shutil.copy(shot, keep)
