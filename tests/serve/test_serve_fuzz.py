"""``scalerl serve`` over a folder that was written to hurt it: every endpoint answers, never
with a byte from outside the served folder, never with a 500, and 400 concurrent requests are
all answered. Files and links are adversarial by hand (the reliability probe's cases) and
random (seeded), and every bound is a bound, never a time the machine must meet exactly."""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from serve_runs import write_run
from starlette.testclient import TestClient

from scalerl.serve.app import build_app

SECRET = "SECRET-7f3a-do-not-serve"
BOUND_S = 120.0  # a request on a busy machine; asserted as a bound, never reached on purpose


def _hostile(root: Path, outside: Path) -> None:
    """The probe's cases: links out of the folder, bad records, bad configs, odd names."""
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "secret.jsonl").write_text(json.dumps({"step": 1, "prompt": SECRET, "completion": SECRET}) + "\n")
    good = write_run(root / "good", upto=30)
    for name in ("config.yaml", "samples.jsonl", "plan.json"):  # a run whose files lead out
        linked = write_run(root / f"link-{name.split('.')[0]}", upto=20)
        (linked / name).unlink()
        (linked / name).symlink_to(outside / ("secret.jsonl" if name.endswith("jsonl") else "secret.txt"))
    (root / "link-metrics").mkdir()
    (root / "link-metrics" / "metrics.jsonl").symlink_to(outside / "secret.jsonl")
    records = {
        "no-step": '{"compute_gpu_hours": 0.1, "val_pass_rate": 0.3}\n',
        "string-compute": '{"step": 1, "compute_gpu_hours": "lots", "val_pass_rate": 0.3}\n',
        "deep": "[" * 100_000 + "]" * 100_000 + "\n",
        "binary": "\x00\x01\x02garbage\n",
        "not-utf8": None,
        "bad-json-middle": '{"step": 0, "compute_gpu_hours": 0.0}\n{"step": 1, \n{"step": 2}\n',
        "list": "[1, 2, 3]\n",
        "nan-values": '{"step": 0, "compute_gpu_hours": NaN, "val_pass_rate": Infinity}\n',
        "backwards": "".join(json.dumps({"step": i, "compute_gpu_hours": 1.0 - 0.1 * i, "val_pass_rate": 0.3})
                             + "\n" for i in range(8)),
    }
    for name, text in records.items():
        (root / name).mkdir()
        path = root / name / "metrics.jsonl"
        path.write_bytes(b"\xff\xfe\xfa\n" if text is None else text.encode())
    configs = {
        "odd-types": "train: {steps: [1]}\nforecast: {target: abc, level: [1]}\nname: {a: 1}\n",
        "max-compute-string": "train: {max_compute: lots, steps: 60}\n",
        "alias-bomb": "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
        "deep-config": "x: " + "[" * 5000 + "]" * 5000 + "\n",
        "garbage-config": "\x00\xff: :\n",
    }
    for name, text in configs.items():
        run = write_run(root / name, upto=20)
        (run / "config.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
    stale = time.time() - 3600.0
    for i, t in enumerate(('"abc"', "null", "[1]", "NaN", "1e400", "true", "1e12")):  # probe ST-time_*
        run = write_run(root / f"status-time-{i}", upto=20)
        (run / "status.json").write_text(f'{{"state": "running", "time": {t}, "pid": 999999999}}\n')
        for f in run.iterdir():
            os.utime(f, (stale, stale))  # its process stopped writing an hour ago
    (root / "unreadable").mkdir()
    os.mkfifo(root / "unreadable" / "metrics.jsonl")  # no regular file: a read of it would block for ever
    odd = os.fsencode(str(root)) + b"/caf\xe9-not-utf8"
    os.mkdir(odd)
    write_run(Path(os.fsdecode(odd)), upto=20)
    (root / "sweep.yaml").write_text("name: hostile\n")
    os.symlink(outside, root / "link-folder")  # a linked folder is not walked
    assert good.is_dir()


def _random(root: Path, seed: int, n: int = 12) -> None:
    """Runs whose files are a good run's with random bytes flipped, cut, or duplicated."""
    rng = random.Random(seed)
    for i in range(n):
        run = write_run(root / f"random{i}", upto=rng.randint(0, 40))
        for name in ("metrics.jsonl", "config.yaml", "samples.jsonl", "plan.json"):
            data = bytearray((run / name).read_bytes())
            for _ in range(rng.randint(0, 6)):
                action = rng.choice(("flip", "cut", "dup", "insert"))
                if not data:
                    break
                j = rng.randrange(len(data))
                if action == "flip":
                    data[j] = rng.randrange(256)
                elif action == "cut":
                    del data[j:j + rng.randint(1, 40)]
                elif action == "dup":
                    data[j:j] = data[max(0, j - 30):j]
                else:
                    data[j:j] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
            (run / name).write_bytes(bytes(data))


@pytest.fixture
def hostile(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    _hostile(root, tmp_path / "outside")
    _random(root, seed=7)
    return root


def _urls(client) -> list[str]:
    listed = client.get("/api/runs").json()
    ids = [r["id"] for r in listed["runs"]]
    urls = ["/", "/api/runs", "/static/app.js", "/static/style.css"]
    for rid in ids:
        q = rid.replace("%", "%25")
        urls += [f"/api/run/{q}", f"/api/run/{q}/samples?q=a", f"/run/{q}"]
    urls += [f"/api/study/{s['id']}" for s in listed["studies"]]
    urls.append("/api/compare?runs=" + ",".join(ids[:25]))
    return urls


def test_every_endpoint_answers_without_a_byte_from_outside_and_never_a_500(hostile):
    with TestClient(build_app([hostile])) as client:
        listed = client.get("/api/runs")
        assert listed.status_code == 200
        runs = {r["id"]: r for r in listed.json()["runs"]}
        assert runs["good"]["state"] in ("running", "paused", "finished")
        for name in ("deep", "binary", "not-utf8", "bad-json-middle", "list", "unreadable"):
            assert runs[name]["state"] == "unreadable" and runs[name]["state_detail"], name
        assert "link-folder" not in " ".join(runs)  # a linked folder is not walked
        for url in _urls(client):
            started = time.monotonic()
            got = client.get(url)
            assert got.status_code in (200, 400, 404), (url, got.status_code, got.text[-500:])
            assert SECRET not in got.text, url
            assert time.monotonic() - started < BOUND_S, url


def test_four_hundred_concurrent_requests_are_all_answered(hostile):
    import urllib.request

    from serve_runs import live_server

    with live_server([hostile]) as url:

        def fetch(path: str) -> tuple[int, float, str]:
            t = time.monotonic()
            try:
                with urllib.request.urlopen(f"{url}{path}", timeout=BOUND_S) as r:
                    return r.status, time.monotonic() - t, r.read().decode("utf-8", "replace")
            except urllib.error.HTTPError as err:
                return err.code, time.monotonic() - t, ""

        fetch("/api/runs")  # the first reads of every run, before the crowd
        paths = ["/api/runs", "/static/style.css", "/api/run/good", "/api/run/deep"] * 100
        with ThreadPoolExecutor(max_workers=32) as pool:
            got = list(pool.map(fetch, paths))
        assert all(status in (200, 404) for status, _, _ in got) and not any(SECRET in body for *_, body in got)
        assert statistics.median(t for _, t, _ in got) < BOUND_S / 4
