"""``train.max_compute``: a run ends at the first step whose compute reaches it, after an
evaluation and a checkpoint, and a ``--resume`` with a larger one goes on (an adaptive sweep's
rungs, ``scalerl.experiments.adaptive``). Real training; every assertion is a bound, since
compute on a CPU is cores x wall time."""

from __future__ import annotations

import json

from conftest import run_overrides

from scalerl.runfolder import COMPUTE, VAL_PASS_RATE, read_records


def test_a_run_stops_at_its_compute_and_a_resume_goes_on_to_the_next(warm_model_dir, tmp_path, cli_here):
    run = tmp_path / "run"
    sets = run_overrides(warm_model_dir, **{"pipeline.backend": "inprocess", "train.steps": 400, "eval.every": 4,
                                            "eval.num_prompts": 8, "eval.k": 1, "pipeline.prompts_per_step": 2,
                                            "pipeline.generations": 4, "forecast.enabled": "false",
                                            "train.max_compute": 2e-4})  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    first = cli_here("train", "--recipe", "scalerl", "--out", str(run), *args)
    assert first.returncode == 0, first.stderr[-2000:]
    records = read_records(run / "metrics.jsonl")
    last = records[-1]
    assert last[COMPUTE] >= 2e-4 and last["step"] < 400 and last.get(VAL_PASS_RATE) is not None
    assert all(r[COMPUTE] < 2e-4 for r in records[:-1] if r["step"] > 0)  # the first step past it ends the run
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == last["step"]
    more = cli_here("train", "--resume", str(run), "--set", "train.max_compute=4e-4")
    assert more.returncode == 0, more.stderr[-2000:]
    after = read_records(run / "metrics.jsonl")
    assert after[-1]["step"] > last["step"] and after[-1][COMPUTE] >= 4e-4
    assert [r["step"] for r in after] == sorted({r["step"] for r in after})  # each step once across the resume
