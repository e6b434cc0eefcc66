"""``train.max_compute``: a run ends at the first step whose compute reaches it, after an
evaluation and a checkpoint, and a ``--resume`` with a larger one goes on (an adaptive sweep's
rungs, ``scalerl.experiments.adaptive``). Real training; every assertion is a bound, since
compute on a CPU is cores x wall time."""

from __future__ import annotations

import json

from pipeline_helpers import run_overrides

from scalerl.fit.forecast.schedule import EvalPlan
from scalerl.pipeline.steps import LoopRules
from scalerl.runfolder import COMPUTE, VAL_PASS_RATE, read_records


def test_a_step_is_validated_by_its_step_or_by_the_compute_it_passed():
    rules = LoopRules("r", steps=100, plan=EvalPlan(100, 10, "every", None, 1.0), eval_every_compute=0.5,
                      checkpoint_every=50, stop_wait_s=1.0, max_minutes=None, max_compute=None)  # fmt: skip
    assert rules.evaluates(10, 0.1, 0.2)  # the step
    assert rules.evaluates(3, 0.45, 0.55) and rules.evaluates(3, 0.9, 1.6)  # passed 0.5; passed 1.0 and 1.5
    assert not rules.evaluates(3, 0.5, 0.99) and not rules.evaluates(3, 0.1, 0.2)
    by_steps = LoopRules("r", 100, EvalPlan(100, 10, "every", None, 1.0), None, 50, 1.0, None, None)
    assert not by_steps.evaluates(3, 0.45, 0.55) and by_steps.evaluates(20, 0.0, 0.0)


def test_a_run_ends_before_a_step_that_would_pass_its_compute():
    rules = LoopRules("r", 100, EvalPlan(100, 10, "every", None, 1.0), None, 50, 1.0, None, 1.0)
    assert rules.ends(5, 0.90, None, 0.05) is None  # 0.95: the next step stays within it
    assert rules.ends(5, 0.96, None, 0.05).startswith("train.max_compute = 1 at step 5: the next step would pass it")
    assert rules.ends(5, 1.0, None, 0.0) == "train.max_compute = 1 reached at step 5"
    assert rules.ends(100, 0.1, None, 0.0) == "train.steps = 100 reached"


def test_a_run_stops_at_its_compute_and_a_resume_goes_on_to_the_next(warm_model_dir, tmp_path, cli_here):
    run = tmp_path / "run"
    sets = run_overrides(warm_model_dir, **{"pipeline.backend": "inprocess", "train.steps": 400, "eval.every": 1000, "eval.schedule": "every",
                                            "eval.every_compute": 5e-5,
                                            "eval.num_prompts": 8, "eval.k": 1, "pipeline.prompts_per_step": 2,
                                            "pipeline.generations": 4, "forecast.enabled": "false",
                                            "train.max_compute": 2e-4})  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    first = cli_here("train", "--recipe", "scalerl", "--out", str(run), *args)
    assert first.returncode == 0, first.stderr[-2000:]
    records = read_records(run / "metrics.jsonl")
    last = records[-1]
    # the run ends before a step that would pass 2e-4 (``LoopRules.ends``): it never passes it by more
    # than its last step, so every record before the last is within it
    assert last["step"] < 400 and last.get(VAL_PASS_RATE) is not None
    assert all(r[COMPUTE] <= 2e-4 for r in records[:-1])
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == last["step"]
    # eval.every_compute: validated at the first step past each multiple of 5e-5 (and steps 0 and last) only
    evaluated = [r for r in records if r.get(VAL_PASS_RATE) is not None]
    for before, r in zip(records, records[1:]):
        crossed = r[COMPUTE] // 5e-5 > before[COMPUTE] // 5e-5
        assert (r.get(VAL_PASS_RATE) is not None) == (crossed or r is last), r["step"]
    assert 1 + 1 <= len(evaluated) <= 2 + int(last[COMPUTE] // 5e-5)
    more = cli_here("train", "--resume", str(run), "--set", "train.max_compute=4e-4")
    assert more.returncode == 0, more.stderr[-2000:]
    after = read_records(run / "metrics.jsonl")
    assert after[-1]["step"] > last["step"] and all(r[COMPUTE] <= 4e-4 for r in after[:-1])
    assert [r["step"] for r in after] == sorted({r["step"] for r in after})  # each step once across the resume
