"""scalerl.serve.app: the JSON endpoints and pages, through Starlette's test client; the CLI's refusals."""

from __future__ import annotations

import socket

import pytest
from serve_runs import write_run
from starlette.testclient import TestClient

from scalerl.serve.app import build_app


@pytest.fixture
def client(tmp_path):
    write_run(tmp_path / "sweep" / "scalerl" / "lr=1e-4" / "seed0", upto=60)
    write_run(tmp_path / "sweep" / "scalerl" / "lr=1e-5" / "seed0", upto=40)
    (tmp_path / "sweep" / "sweep.yaml").write_text("name: lr\n")
    with TestClient(build_app([tmp_path / "sweep"])) as c:  # the server's lifespan closes its forecasts
        yield c


def test_the_runs_list_and_a_runs_data(client):
    d = client.get("/api/runs").json()
    assert [r["id"] for r in d["runs"]] == ["scalerl/lr=1e-4/seed0", "scalerl/lr=1e-5/seed0"]
    assert [s["id"] for s in d["studies"]] == ["sweep"]
    run = _until(lambda: client.get("/api/run/scalerl/lr=1e-4/seed0").json(), lambda d: "median" in d["band"])
    assert run["state"] == "finished" and len(run["validation"]["value"]) == 13 and run["band"]["median"]
    hits = client.get("/api/run/scalerl/lr=1e-4/seed0/samples", params={"q": "40+2"}).json()
    assert [h["prompt"] for h in hits] == ["add 40+2 ="]
    study = client.get("/api/study/sweep").json()
    assert len(study["curves"]) == 2


def test_pages_load_their_scripts_from_this_server_only(client):
    for url in ("/", "/run/scalerl/lr=1e-4/seed0", "/study/sweep"):
        page = client.get(url)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "http://" not in page.text and "https://" not in page.text  # no CDN: works offline
    js = client.get("/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000 and b"plotly" in js.content[:2000].lower()
    assert client.get("/static/app.js").status_code == 200


def test_nothing_outside_the_served_folders_is_reachable(client):
    assert client.get("/api/run/../../etc").status_code == 404
    # the client removes plain dot segments; encoded ones reach the app's own guard
    escape = client.get("/api/run/..%2F..%2Fetc")
    assert escape.status_code == 404 and "no run '../../etc' under the served folders" in escape.text
    assert client.get("/static/app.py").status_code == 404  # a file beside the pages, not one of them
    assert client.get("/api/run/7/anything").status_code == 404
    assert client.get("/static/..%2Fapp.py").status_code == 404
    assert client.get("/api/run/scalerl/lr=1e-4/seed0/samples", params={"limit": "lots"}).status_code == 400


def test_bad_input_is_one_sentence_with_exit_2(tmp_path, cli_here):
    missing = cli_here("serve", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "is not a folder" in missing.stderr and len(missing.stderr.splitlines()) == 1
    host = cli_here("serve", str(tmp_path), "--host", "localhost:80")
    assert host.returncode == 2 and "is not an IP address" in host.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = cli_here("serve", str(tmp_path), "--port", str(taken.getsockname()[1]))
    assert busy.returncode == 2 and "choose another --port" in busy.stderr


def _until(get, done, bound_s: float = 300.0):
    """``get()`` until ``done`` holds of it (fits and forecasts are made in the background: a
    bound for a busy machine, never an exact time)."""
    import time

    deadline = time.monotonic() + bound_s
    while not done(d := get()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return d


def test_picked_runs_are_compared_with_the_papers_table_and_verdict(client):
    d = _until(lambda: client.get("/api/compare", params={"runs": "scalerl/lr=1e-4/seed0,scalerl/lr=1e-5/seed0"}).json(),
               lambda d: len(d["fits"]) == 2 and all(c.get("band") for c in d["curves"].values()))
    assert list(d["curves"]) == d["order"] == ["scalerl/lr=1e-5/seed0", "scalerl/lr=1e-4/seed0"]  # as numbers
    assert {f["run"] for f in d["fits"]} == set(d["curves"]) and {"A", "B", "C_mid", "verdict"} <= set(d["fits"][0])
    assert "decided_by" in d["verdict"] and isinstance(d["verdict"]["reasons"], list)
    for c in d["curves"].values():  # each run's law over its range and its forecast band ahead of it
        assert len(c["law"]["compute"]) == len(c["law"]["value"]) and c["law"]["compute"][-1] == c["compute"][-1]
        assert c["band"]["compute"][0] == c["compute"][-1]
        assert all(lo <= m <= hi for lo, m, hi in zip(c["band"]["lo"], c["band"]["median"], c["band"]["hi"]))
    assert d["versus"] is None
    assert client.get("/api/compare", params={"runs": "nope"}).status_code == 404
    assert client.get("/compare", params={"runs": "scalerl/lr=1e-4/seed0"}).status_code == 200


def test_a_folder_with_no_runs_yet_is_said_in_one_line_and_served(tmp_path, cli_here, monkeypatch):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(kw["port"]))
    done = cli_here("serve", str(tmp_path), "--port", "8799")
    assert done.returncode == 0 and served == [8799]
    assert f"{tmp_path} holds no runs yet (no metrics.jsonl below it); they appear as they start." in done.stdout


def test_sigterm_ends_the_server_with_one_line_and_exit_143(tmp_path):
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "scalerl", "serve", str(tmp_path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until it listens
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.terminate()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "scalerl serve: stopped by SIGTERM.", err
    assert "Traceback" not in err


def test_a_runs_records_download_as_they_are_written(client, tmp_path):
    got = client.get("/api/run/scalerl/lr=1e-4/seed0/metrics.jsonl")
    assert got.status_code == 200 and "attachment" in got.headers["content-disposition"]
    assert got.content == (tmp_path / "sweep/scalerl/lr=1e-4/seed0/metrics.jsonl").read_bytes()
    assert client.get("/api/run/nope/metrics.jsonl").status_code == 404
    d = client.get("/api/runs").json()
    assert d["columns"] == [] and all(r["values"] == {} for r in d["runs"])  # the two runs' configs agree
    o = client.get("/api/overview").json()
    assert [r["id"] for r in o["runs"]] == [r["id"] for r in d["runs"]]


def test_a_records_download_names_any_folder(tmp_path):
    write_run(tmp_path / "实验 \"1\"", upto=10)
    with TestClient(build_app([tmp_path])) as client:
        (run,) = client.get("/api/runs").json()["runs"]
        got = client.get(f"/api/run/{run['id']}/metrics.jsonl")
        assert got.status_code == 200 and "filename*=UTF-8''" in got.headers["content-disposition"]
        assert got.content == (tmp_path / "实验 \"1\"" / "metrics.jsonl").read_bytes()


def test_a_folder_named_with_a_newline_round_trips(tmp_path):
    """Probe NAME-content-disposition: a folder ``new\\nline`` was listed, its page and download 404."""
    from urllib.parse import quote

    write_run(tmp_path / "new\nline", upto=10)
    write_run(tmp_path / "tab\there", upto=10)
    with TestClient(build_app([tmp_path])) as client:
        for run in client.get("/api/runs").json()["runs"]:
            rid = quote(run["id"], safe="/")
            assert client.get(f"/run/{rid}").status_code == 200
            assert client.get(f"/api/run/{rid}").status_code == 200
            got = client.get(f"/api/run/{rid}/metrics.jsonl")
            assert got.status_code == 200 and got.content == (tmp_path / run["id"] / "metrics.jsonl").read_bytes()


def _listening(tmp_path, port: int):
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "scalerl", "serve", str(tmp_path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("serve did not listen")


def test_downloads_stream_a_few_at_a_time_and_sigterm_ends_the_server_while_they_hang(tmp_path):
    """Probe BIG-concurrent-dl: 12 downloads of a 250 MB log held it whole each and ran out of
    memory; afterwards SIGTERM did not stop the server in 30 s. A download now streams the file in
    chunks, ``MAX_STREAMS`` at a time (the next one is told to come back), and a server with
    downloads hanging on clients that stopped reading still stops on SIGTERM."""
    import time

    from scalerl.serve.app import CHUNK, MAX_STREAMS

    run = write_run(tmp_path / "big", upto=10)
    with (run / "metrics.jsonl").open("a") as f:  # 8 chunks and more
        f.write((" " * 1023 + "\n") * (8 * CHUNK // 1024))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = _listening(tmp_path, port)
    hanging = []
    try:
        for _ in range(MAX_STREAMS):  # each reads only the head of its answer, then stops reading
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /api/run/big/metrics.jsonl HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            hanging.append(s)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /api/run/big/metrics.jsonl HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 503")  # the next one waits its turn
        s.close()
        start = time.monotonic()
        proc.terminate()
        _, err = proc.communicate(timeout=120)
        assert time.monotonic() - start < 30.0  # a bound: the probe saw more than 30 s
        assert proc.returncode == 143 and err.strip().splitlines()[-1] == "scalerl serve: stopped by SIGTERM."
    finally:
        for s in hanging:
            s.close()
        proc.kill() if proc.poll() is None else None


def test_a_folder_this_user_cannot_read_is_one_sentence_and_never_a_traceback(tmp_path, cli_here,
                                                                                         monkeypatch):
    """Probe SV-perm-root: served as a user who cannot read the folder, serve exited 1 with a traceback."""
    import os
    from pathlib import Path

    from scalerl.serve.runs import Served

    locked = tmp_path / "locked"
    write_run(locked, upto=10)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == locked else real(p, mode, **kw))
    from scalerl.serve.cli import handle

    class Args:
        dirs, port, host = [locked], 8799, "127.0.0.1"

    assert handle(Args()) == 2
    real_is_file = Path.is_file

    def is_file(self):  # as a user without the right to enter it: EACCES
        if self.parent == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    from scalerl import runfolder as rf

    assert rf.is_run(locked) is False  # not a run we may read: no traceback
    Served([locked]).discover()
