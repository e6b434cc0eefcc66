"""A real browser over a run that is training: Debian's Chromium, headless, driven by Playwright.

The page of a ``scalerl train`` run in progress draws the validation curve and the forecast
band ahead of it, and a new evaluation appears without a reload. Every wait is a bound (the
run is real, and the machine may be busy), never an exact time."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make test installs it: make browser)")
WAIT_MS = 300_000  # a generous bound for a busy machine; the run takes well under a minute idle


@pytest.fixture
def served(tmp_path):
    import uvicorn

    from scalerl.serve.app import build_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app([tmp_path]), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}", tmp_path
    server.should_exit = True
    thread.join(30)
    assert not thread.is_alive()


def _train(model_dir, out) -> subprocess.Popen:
    sets = {"model.base": str(model_dir), "task.knobs": "{min_digits: 1, max_digits: 2}",
            "pipeline.backend": "inprocess", "pipeline.prompts_per_step": 2, "pipeline.generations": 4,
            "sampling.max_new_tokens": 48, "length.interrupt_range": "[30, 36]", "optim.lr": 2e-4,
            "train.steps": 400, "train.max_minutes": "null", "eval.every": 2, "eval.num_prompts": 32, "eval.k": 1,
            "forecast.enabled": "false", "log.tensorboard": "false", "log.progress": "false"}  # fmt: skip
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    return subprocess.Popen([sys.executable, "-m", "scalerl", "train", "--recipe", "scalerl", "--out", str(out), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def test_a_training_runs_page_draws_the_band_and_updates_without_a_reload(served, warm_model_dir):
    from PIL import Image
    from playwright.sync_api import sync_playwright

    url, root = served
    training = _train(warm_model_dir, root / "run")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            deadline = time.monotonic() + WAIT_MS / 1000
            while not (root / "run" / "metrics.jsonl").is_file() and time.monotonic() < deadline:
                time.sleep(0.5)  # the run page exists once the run has written its first record
            page.goto(f"{url}/run/run")
            page.evaluate("window.notReloaded = true")
            names = "Array.from(document.getElementById('validation').data || [], t => t.name)"
            page.wait_for_function(f"{names}.includes('95% band') && {names}.includes('forecast')", timeout=WAIT_MS)
            assert page.locator("#validation .scatterlayer .trace").count() >= 3  # curve, band, forecast drawn
            seen = int(page.evaluate("document.getElementById('validation').dataset.points"))
            page.wait_for_function(f"Number(document.getElementById('validation').dataset.points) > {seen}",
                                   timeout=WAIT_MS)  # fmt: skip
            assert page.evaluate("window.notReloaded === true")  # the new evaluation came without a reload
            # running, or finished by now on a fast machine: a state, whichever the race gave
            assert page.locator("#head .state-running, #head .state-finished").count() == 1
            page.screenshot(path=str(root / "run.png"), full_page=False)
            page.goto(url)
            page.wait_for_selector("#runs tbody tr")
            assert "run" in page.locator("#runs tbody").inner_text()
            browser.close()
    finally:
        training.terminate()
        training.wait(60)
    Image.open(root / "run.png").verify()
