"""Screenshots of ``scalerl serve`` for the README: the runs list, a run's page and a study's.

    PYTHONPATH=src .venv/bin/python scripts/serve_screenshots.py DIR [DIR ...] [--out docs]

Serves DIR (run or study folders) on a free local port, opens each page in Debian's Chromium
(headless, driven by Playwright), waits for its charts, and writes ``serve-runs.png``,
``serve-run.png`` (the first run, or ``--run ID``) and ``serve-study.png`` (the first study
with an adaptive study's decisions, else the first study) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs"))
    ap.add_argument("--run", help="the run to show (an id of the runs list)")
    args = ap.parse_args()
    import uvicorn
    from playwright.sync_api import sync_playwright

    from scalerl.serve.app import build_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(args.dirs), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    listing = json.load(urllib.request.urlopen(f"{url}/api/runs"))
    run = args.run or listing["runs"][0]["id"]
    studies = [s["id"] for s in listing["studies"]]
    adaptive = [s for s in studies if json.load(urllib.request.urlopen(f"{url}/api/study/{s}"))["decisions"]]
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(url)
        page.wait_for_selector("#runs tbody tr")
        page.screenshot(path=str(args.out / "serve-runs.png"))
        page.goto(f"{url}/run/{run}")
        page.wait_for_function("(document.getElementById('validation').data || []).length >= 1", timeout=60_000)
        page.wait_for_timeout(500)
        page.screenshot(path=str(args.out / "serve-run.png"))
        if studies:
            page.goto(f"{url}/study/{(adaptive or studies)[0]}")
            page.wait_for_function("(document.getElementById('curves').data || []).length >= 1", timeout=60_000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(args.out / "serve-study.png"), full_page=True)
        browser.close()
    server.should_exit = True
    print(f"wrote {args.out}/serve-runs.png, serve-run.png" + (", serve-study.png" if studies else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
