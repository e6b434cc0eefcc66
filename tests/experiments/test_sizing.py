"""An adaptive study too small to decide is refused after its first point's first rung, with
the budget that would decide (``scalerl.experiments.sizing``): the newcomer's study at 0.05
core-hours a point, where one step cost 0.03 and an evaluation 0.02, decided nothing and used
126% of the compute."""

from __future__ import annotations

import json

import pytest

from scalerl.experiments.adaptive import Adaptive, run_adaptive
from scalerl.experiments.sizing import Costs, StudyTooSmall
from scalerl.experiments.spec import load_spec, points
from scalerl.runfolder import COMPUTE, VAL_PASS_RATE


def test_the_costs_and_the_budget_that_decides_by_hand():
    # steps of 0.03 compute; each evaluation 36 s on 2 devices = 0.02 compute
    records = [{"step": i, COMPUTE: 0.03 * i, VAL_PASS_RATE: 0.3, "eval_s": 36.0} for i in range(4)]
    costs = Costs.of(records, 2.0, "p")
    assert costs.step == pytest.approx(0.03) and costs.evaluation == pytest.approx(0.02) and costs.steps == 3
    # evaluation at most 20%: gap = ceil(0.02 x 0.8 / (0.2 x 0.03)) = 3 steps; the first rung holds
    # 8 evaluations: 8 x (3 x 0.03 + 0.02) = 0.88, an eighth of the budget: 7.04
    assert costs.budget(0.2, 8, 1 / 8) == pytest.approx(7.04)
    assert Costs.of(records[:1], 2.0, "p") is None


def newcomer_train(calls):
    """A stand-in trainer at the newcomer's costs: every step 0.031 compute and evaluated (eval_s
    28 s on 2 devices), stopped where the next step would pass ``train.max_compute``, after one
    step at least (as the trainer: step 0's evaluation, then a step)."""

    def train(cfg, run_dir, resume=False, log=print):
        run_dir.mkdir(parents=True, exist_ok=True)
        metrics = run_dir / "metrics.jsonl"
        have = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.exists() else []
        (run_dir / "plan.json").write_text(json.dumps({"plan": {"devices": 2}}))
        calls.append(run_dir.parent.name)
        with metrics.open("a") as f:
            i = len(have)
            while True:
                f.write(json.dumps({"step": i, COMPUTE: 0.031 * i + 1e-4, VAL_PASS_RATE: 0.3, "eval_s": 28.0}) + "\n")
                i += 1
                if i > 1 and 0.031 * i + 1e-4 > cfg.train.max_compute:
                    break

    return train


@pytest.fixture
def newcomer(tmp_path, warm_model_dir):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"recipes: [scalerl]\nseeds: [0]\nset:\n  model.base: {warm_model_dir}\n"
                    "axes:\n  lr: [1.0e-6, 5.0e-5, 2.0e-4]\nadaptive:\n  budget: 0.05\n")  # fmt: skip
    loaded = load_spec(spec)
    return loaded, points(loaded, tmp_path / "out"), tmp_path / "out"


def test_the_newcomers_study_is_refused_after_one_point_with_the_budget_that_decides(newcomer):
    spec, variants, out = newcomer
    calls = []
    with pytest.raises(StudyTooSmall) as err:
        run_adaptive(variants, out, spec.adaptive, parallel=1, runner="local", train=newcomer_train(calls),
                     log=lambda _: None)  # fmt: skip
    assert len(set(calls)) == 1  # only the first point trained, its first rung only
    text = str(err.value)
    assert text.startswith("adaptive.budget = 0.05 cannot decide here: ") and text.endswith("--force runs it anyway.")
    # 0.031 a step, 28 s x 2 / 3600 = 0.01556 an evaluation: gap = ceil(0.01556 x 0.8 / (0.2 x 0.031)) = 3,
    # the first rung 8 x (3 x 0.031 + 0.01556) = 0.8684, the budget 8 x that = 6.95
    assert "the budget must be about 6.95 or more" in text


def test_force_runs_it_anyway_and_no_point_never_forecast_is_called_tied(newcomer):
    spec, variants, out = newcomer
    said = []
    decided = run_adaptive(variants, out, Adaptive(budget=0.05), parallel=1, runner="local",
                           train=newcomer_train([]), log=said.append, force=True)  # fmt: skip
    assert any(line.endswith("running anyway (--force).") for line in said)
    text = decided.to_dict()["winner_text"]
    assert text.startswith("undecided: ") and "tied" not in text
