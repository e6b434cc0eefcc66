"""A real browser over a run that is training and a study that is running: Debian's Chromium,
headless, driven by Playwright.

The page of a ``scalerl train`` run in progress draws the validation curve and the forecast
band ahead of it, and a new evaluation appears without a reload. Over a study's folders as
runs write them (one point paused between rungs, one stopped by SIGTERM): every axis has its
title, the legend names every drawn thing, smoothing changes the smoothed series and never the
raw points, log-x and the x axis switch, the downloads return what was drawn and what was
written, the runs list draws every run and its seed groups, the states read as the files say,
the study in progress names its rung and no winner, and the run page's numbers are ``scalerl
plan --json``'s. Every wait is a bound (the machine may be busy), never an exact time."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make test installs it: make browser)")
WAIT_MS = 300_000  # a generous bound for a busy machine; the run takes well under a minute idle


@pytest.fixture
def served(tmp_path):
    from serve_runs import live_server

    with live_server([tmp_path]) as url:
        yield url, tmp_path


def _train(model_dir, out) -> subprocess.Popen:
    sets = {"model.base": str(model_dir), "task.knobs": "{min_digits: 1, max_digits: 2}",
            "pipeline.backend": "inprocess", "pipeline.prompts_per_step": 2, "pipeline.generations": 4,
            "sampling.max_new_tokens": 48, "length.interrupt_range": "[30, 36]", "optim.lr": 2e-4,
            "train.steps": 400, "train.max_minutes": "null", "eval.every": 2, "eval.schedule": "every", "eval.num_prompts": 32, "eval.k": 1,
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
            page.wait_for_function(f"{names}.includes('95% band') && {names}.includes('forecast (median)')",
                                   timeout=WAIT_MS)  # fmt: skip
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


def _study(root):
    """A sweep folder as ``scalerl sweep --adaptive`` leaves it mid-study: two settings x two
    seeds, one point paused between rungs, one stopped by SIGTERM, decisions.json in progress."""
    import json

    from serve_runs import write_run

    from scalerl import runfolder as rf

    for lr in ("1e-4", "1e-5"):
        for seed in (0, 1):
            run = write_run(root / f"lr={lr}" / f"seed{seed}", upto=60 if seed == 0 else 50)
            cfg = {"name": "scalerl", "train": {"steps": 60, "seed": seed}, "optim": {"lr": float(lr)},
                   "forecast": {"target": 0.6}}  # fmt: skip
            (run / "config.yaml").write_text(json.dumps(cfg))
            (run / "plan.json").write_text(json.dumps({"plan": {"device": "cpu", "accelerated": False}}))
    (root / "sweep.yaml").write_text("name: lr\n")
    (root / "decisions.json").write_text(json.dumps({
        "done": False, "winner": ["lr=1e-4/seed0"], "stopped": [], "budget": 0.06, "rounds": [],
        "under_way": {"rung": 2, "of": 4, "at_compute": 0.015, "running": ["lr=1e-4/seed0", "lr=1e-5/seed0"]}}))
    rf.write_status(root / "lr=1e-4" / "seed1", "paused", "between rungs: trained to compute 0.051 of the study's 0.06")
    rf.write_status(root / "lr=1e-5" / "seed1", "stopped", "stopped by SIGTERM at step 50", signal="SIGTERM")


def test_the_pages_have_what_wandb_users_expect_and_agree_with_plan(served, tmp_path):
    import json

    from playwright.sync_api import sync_playwright

    from scalerl.cli import main

    url, root = served
    _study(root / "sweep")
    run = root / "sweep" / "lr=1e-4" / "seed0"
    assert main(["plan", str(run), "--target", "0.6", "--json", str(tmp_path / "plan.json")]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 1000}, accept_downloads=True)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/run/sweep/lr=1e-4/seed0")
        names = "Array.from(document.getElementById('validation').data || [], t => t.name)"
        page.wait_for_function(f"{names}.includes('forecast (median)')", timeout=WAIT_MS)
        drawn = page.evaluate(names)
        assert {"validation", "95% band", "forecast (median)", "target 0.6"} <= set(drawn)
        assert any(n.startswith("target crossed (95%): ") for n in drawn)
        titles = page.evaluate("(() => { const l = document.getElementById('validation').layout; "
                               "return [l.xaxis.title.text, l.yaxis.title.text]; })()")  # fmt: skip
        assert titles == ["compute (core-hours)", "validation pass rate"]
        assert page.evaluate("document.getElementById('t-entropy').layout.xaxis.title.text") == "step"
        # the header's numbers are plan's, to the digits shown
        at = plan["at_budget"]
        assert page.inner_text("#h-forecast") == f"{at['value']:.3f} [{at['pred_lo']:.3f}, {at['pred_hi']:.3f}]"
        h = plan["hours"]
        assert page.inner_text("#h-hours") == f"{h['median']:.4f} [{h['lo']:.4f}, {h['hi']:.4f}]"
        assert page.inner_text("#h-preach") == f"{plan['p_reach']:.2f}"
        # smoothing: a smoothed series appears; the raw points stay as they were
        raw = page.evaluate("document.getElementById('validation').data[0].y")
        page.fill("#smooth", "0.8")
        page.dispatch_event("#smooth", "input")
        smoothed = page.evaluate("document.getElementById('validation').data.find(t => t.name.startsWith('validation, smoothed')).y")
        assert page.evaluate("document.getElementById('validation').data[0].y") == raw
        assert smoothed != raw and smoothed[0] == raw[0]  # debiased: the first point is itself
        # log x, and the x axis switch: the band follows on steps and hours
        page.check("#logx")
        assert page.evaluate("document.getElementById('validation').layout.xaxis.type") == "log"
        for axis, title in (("step", "step"), ("hours", "hours since the run started")):
            page.check(f"input[name=x][value={axis}]")
            assert page.evaluate("document.getElementById('validation').layout.xaxis.title.text") == title
            assert "95% band" in page.evaluate(names)
        # the downloads: the chart's data as drawn, the records as written
        with page.expect_download() as got:
            page.click("#csv-validation")
        rows = got.value.path().read_text().splitlines()
        assert rows[0] == "trace,x,y" and sum(r.startswith('"validation",') for r in rows) == len(raw)
        with page.expect_download() as got:
            page.click("#records")
        assert got.value.path().read_bytes() == (run / "metrics.jsonl").read_bytes()
        # the runs list: a chart of every run, seed groups, the states as the files say
        page.goto(url)
        page.wait_for_function("Number(document.getElementById('overview').dataset.traces || 0) >= 4", timeout=WAIT_MS)
        page.check("#groups")
        groups = page.evaluate("Array.from(document.getElementById('overview').data, t => t.name)")
        assert {"scalerl (optim.lr=0.0001): mean of 2 seeds", "scalerl (optim.lr=1e-05): mean of 2 seeds"} <= set(groups)
        assert page.evaluate("document.getElementById('overview').layout.xaxis.title.text") == "compute (core-hours)"
        states = page.locator("#runs tbody td[class^=state-]").all_inner_texts()
        assert any(s.startswith("paused") and "between rungs" in s for s in states)
        assert any(s.startswith("stopped") and "SIGTERM" in s for s in states)
        headers = page.locator("#runs thead th").all_inner_texts()
        assert "optim.lr" in headers and "train.seed" in headers
        # the study in progress: its rung, never a winner
        page.goto(f"{url}/study/sweep")
        page.wait_for_function("document.getElementById('progress').textContent.includes('rung 2 of 4')", timeout=WAIT_MS)
        assert "Winner" not in page.inner_text("body")
        assert errors == []
        browser.close()
