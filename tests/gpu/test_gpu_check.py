"""``scripts/gpu_check.sh --dry-run`` works on this machine (tiny model, a few steps)."""

import json
import subprocess
from pathlib import Path

import pytest

# serial: these tests start Ray or bind a rendezvous port; make test runs them after the parallel part
pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_writes_every_figure(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the report: not JSON"))
    assert report["dry_run"] and report["gpu_tests"]["returncode"] in (0, 5)  # 5: all skipped / none ran
    assert [r["batch"] for r in report["engine"]] == [4, 8]
    assert all(r["engine_tok_s"] > 0 and r["generate_tok_s"] > 0 for r in report["engine"])
    assert report["peak_flop_s"] > 0 and 0 < report["learner"]["nano"]["mfu"] and report["learner"]["nano"]["step_s"] > 0
    assert set(report["mismatch"]) == {"fp32", "bf16", "bf16+fp32head"}  # fp16 needs CUDA
    assert all(m["mismatch_tokens"] > 0 and m["mismatch_kl"] >= 0 for m in report["mismatch"].values())
    assert set(report["section_s"]) == {"gpu_tests", "engine", "peak_flop_s", "learner", "sync", "mismatch",
                                        "pipeline", "learner_ranks"}
    sync = report["sync"]  # on CPU: shared memory and gloo (cuda_ipc needs a GPU)
    assert set(sync) == {"shm", "collective"} and all(t["gb_s"] > 0 and t["share_of_step"] > 0 for t in sync.values())
    ranks = report["learner_ranks"]
    assert ranks["world_size"] == 1 and ranks["trained_tok_s"] > 0 and ranks["sync_bytes"] > 0
    rise = report["pipeline"]
    assert rise["steps"] == 2 and rise["staleness_max"] <= 1 and len(rise["val_pass_rate"]) == 3


def test_a_failing_section_records_its_error_and_the_rest_still_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import gpu_check

    out = tmp_path / "r.json"
    report: dict = {}
    gpu_check._section(report, "engine", out, lambda: 1 / 0)
    gpu_check._section(report, "peak_flop_s", out, lambda: 2.0)
    saved = json.loads(out.read_text())
    assert saved["engine"]["error"].startswith("ZeroDivisionError") and saved["peak_flop_s"] == 2.0


def test_a_bare_python_is_told_in_one_sentence_which_wheels_are_missing(tmp_path):
    import shutil
    import sys

    bare = shutil.which("python3", path="/usr/bin:/bin")
    if bare is None or Path(bare).resolve() == Path(sys.executable).resolve():
        import pytest

        pytest.skip("no system python3 apart from the project's")
    run = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path / "x.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": bare})
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "lacks torch" in lines[0] and "pydantic==2.14.4" in lines[0] and "--python-version 3.12" in lines[0]
    assert "/dev/shm free" in run.stdout and not (tmp_path / "x.json").exists()
