"""The README's screenshots of ``scalerl serve``, taken of real runs in a headless Chromium.

    PYTHONPATH=src .venv/bin/python scripts/serve_screenshots.py [--out docs]

Builds a study folder from the forecast corpus's real runs (``bench/corpus/scalerl-addition``:
two learning rates x two seeds; each run cut at 45% of its steps, as a study paused between
rungs would show it, and one cut at 25% and marked stopped by SIGTERM), serves it, and saves
``serve-runs.png`` (the runs list with its chart and seed groups), ``serve-run.png`` (a run's
page, smoothed, with the band and the target) and ``serve-study.png`` (the study page against a
baseline) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "bench" / "corpus" / "scalerl-addition"
RUNS = {("1e-4", 0): "s0_lr0.0001", ("1e-4", 1): "s1_lr0.0001", ("5e-5", 0): "s0_lr5e-05", ("5e-5", 1): "s1_lr5e-05"}


def build(root: Path) -> Path:
    from scalerl import runfolder as rf

    study = root / "lr-study"
    for (lr, seed), name in RUNS.items():
        rows = [json.loads(x) for x in (CORPUS / f"{name}.jsonl").read_text().splitlines()]
        keep = 0.25 if (lr, seed) == ("5e-5", 1) else 0.45
        rows = rows[: max(int(len(rows) * keep), 2)]
        run = study / f"lr={lr}" / f"seed{seed}"
        run.mkdir(parents=True)
        steps = 1200
        cfg = {"name": "scalerl", "train": {"steps": steps, "seed": seed}, "optim": {"lr": float(lr)},
               "eval": {"every": 50}, "forecast": {"target": 0.8}}  # fmt: skip
        (run / "config.yaml").write_text(json.dumps(cfg))
        (run / "plan.json").write_text(json.dumps({"plan": {"device": "cpu", "accelerated": False, "cores": 2}}))
        with (run / "metrics.jsonl").open("w") as f:
            for r in rows:
                rec = {"step": r["step"], "compute_gpu_hours": r["compute_gpu_hours"], "wall_s": r["wall_s"],
                       "val_pass_rate": r["val_pass_rate"]}  # fmt: skip
                if r.get("train_reward") is not None:
                    rec["reward_mean"] = r["train_reward"]
                if r.get("entropy") is not None:
                    rec["entropy"] = r["entropy"]
                f.write(json.dumps(rec) + "\n")
        if (lr, seed) == ("5e-5", 1):
            rf.write_status(run, "stopped", f"stopped by SIGTERM at step {rows[-1]['step']}", signal="SIGTERM")
        else:
            rf.write_status(run, "paused", "between rungs: trained to compute 0.18 of the study's 0.4")
    (study / "sweep.yaml").write_text("name: lr\n")
    return study


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args()
    import uvicorn
    from playwright.sync_api import sync_playwright

    from scalerl.serve.app import build_app

    scratch = Path(tempfile.mkdtemp(prefix="scalerl-shots-"))
    try:
        build(scratch)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(build_app([scratch]), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{url}/run/lr-study/lr=1e-4/seed0")
            page.wait_for_function("Array.from(document.getElementById('validation').data || [], t => t.name)"
                                   ".includes('forecast (median)')", timeout=300_000)  # fmt: skip
            page.fill("#smooth", "0.6")
            page.dispatch_event("#smooth", "input")
            page.screenshot(path=str(args.out / "serve-run.png"), full_page=False)
            page.goto(url)
            page.wait_for_function("Number(document.getElementById('overview').dataset.traces || 0) >= 12",
                                   timeout=300_000)  # fmt: skip
            time.sleep(3)  # every band made
            page.goto(url)
            page.wait_for_function("Number(document.getElementById('overview').dataset.traces || 0) >= 12",
                                   timeout=300_000)  # fmt: skip
            page.screenshot(path=str(args.out / "serve-runs.png"), full_page=True)
            page.goto(f"{url}/study/lr-study")
            page.wait_for_selector("#fits tbody tr", timeout=300_000)
            page.select_option("#baseline", "lr=1e-4/seed0")
            page.wait_for_selector("#versus-table tbody tr", timeout=300_000)
            page.screenshot(path=str(args.out / "serve-study.png"), full_page=True)
            browser.close()
        server.should_exit = True
        thread.join(30)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for name in ("serve-runs.png", "serve-run.png", "serve-study.png"):
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
