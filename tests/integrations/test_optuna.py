"""``scalerl.integrations.optuna.ForecastPruner``: scalerl's forecast as an Optuna pruner.

The rule is checked on written curves, where its answer is known, and inside a real Optuna
study whose trials are tiny ``scalerl train`` runs, reported evaluation by evaluation while
they train, as a user's objective would (a trial the pruner stops is terminated)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

optuna = pytest.importorskip("optuna")

from scalerl.fit import law  # noqa: E402
from scalerl.fit.forecast.states import MIN_EVALS  # noqa: E402
from scalerl.integrations.optuna import ForecastPruner  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _objective(ceilings: dict[int, float], pruner_seen: list):
    """Trial ``n`` reports Eq. 1 with ceiling ``ceilings[n]`` (noise 0.01) every 100 steps."""

    def objective(trial):
        rng = np.random.default_rng(trial.number)
        for step in range(0, 2001, 100):
            v = float(np.clip(law.sigmoid(max(step, 1), ceilings[trial.number], 1.5, 600.0, 0.1)
                              + rng.normal(0.0, 0.01), 0.0, 1.0))  # fmt: skip
            trial.report(v, step)
            if trial.should_prune():
                pruner_seen.append((trial.number, len(trial.storage.get_trial(trial._trial_id).intermediate_values)))
                raise optuna.TrialPruned()
        return v

    return objective


def test_a_trial_that_cannot_beat_the_best_is_pruned_once_it_has_a_forecast():
    """Trial 0 (ceiling 0.8) finishes; trials 1 and 3 (0.4, 0.35) cannot reach its 0.8 and are
    pruned, never before their sixth report; trial 2 (0.85) beats it and is never pruned."""
    pruned: list = []
    pruner = ForecastPruner(budget=2000)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    study.optimize(_objective({0: 0.8, 1: 0.4, 2: 0.85, 3: 0.35}, pruned), n_trials=4)
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "PRUNED", "COMPLETE", "PRUNED"]
    assert all(MIN_EVALS <= n < 21 for _, n in pruned)
    assert pruner.last[1] < 0.05 and pruner.last[2] >= 0.05


def test_it_never_prunes_the_first_trial_nor_a_study_that_minimizes():
    for direction, n in (("maximize", 1), ("minimize", 2)):
        pruned: list = []
        study = optuna.create_study(direction=direction, pruner=ForecastPruner(budget=2000))
        study.optimize(_objective({0: 0.8, 1: 0.2}, pruned), n_trials=n)
        assert pruned == [] and all(t.state.name == "COMPLETE" for t in study.trials)


@pytest.mark.parametrize(("kw", "says"), [({"budget": 0}, "budget must be a positive number"),
                                          ({"budget": 10, "threshold": 1.5}, "threshold must lie in")])  # fmt: skip
def test_a_bad_setting_is_one_sentence(kw, says):
    with pytest.raises(ValueError, match=says):
        ForecastPruner(**kw)


def test_it_prunes_real_scalerl_runs_reported_while_they_train(warm_model_dir, tmp_path):
    """Two real tiny runs, one after the other in one Optuna study: each evaluation is reported
    as it is written (step, val_pass_rate), and a trial the pruner stops is terminated. The
    pruner's answer at every report is its P(beat) against its threshold; the outcome of the
    race between a run and its reports is not asserted, only what each trial saw."""
    from scalerl.runfolder import VAL_PASS_RATE, read_records

    lrs = {0: 2e-4, 1: 1e-9}  # one that learns, one that cannot
    pruner = ForecastPruner(budget=60)
    answers: dict[int, list[tuple[float, bool]]] = {0: [], 1: []}

    def objective(trial):
        out = tmp_path / f"trial{trial.number}"
        sets = {"model.base": str(warm_model_dir), "task.knobs": "{min_digits: 1, max_digits: 2}",
                "pipeline.backend": "inprocess", "pipeline.prompts_per_step": 4, "pipeline.generations": 8,
                "sampling.max_new_tokens": 48, "length.interrupt_range": "[30, 36]", "optim.lr": lrs[trial.number],
                "train.steps": 60, "train.max_minutes": "null", "eval.every": 3, "eval.schedule": "every", "eval.num_prompts": 48,
                "eval.k": 1, "forecast.enabled": "false", "log.tensorboard": "false", "log.progress": "false",
                "train.cores": 2}  # fmt: skip
        args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
        proc = subprocess.Popen([sys.executable, "-m", "scalerl", "train", "--recipe", "scalerl", "--out", str(out),
                                 *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        reported = set()
        try:
            while True:
                running = proc.poll() is None
                for r in read_records(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []:
                    if r.get(VAL_PASS_RATE) is not None and r["step"] not in reported:
                        reported.add(r["step"])
                        trial.report(float(r[VAL_PASS_RATE]), int(r["step"]))
                        stop = trial.should_prune()
                        answers[trial.number].append((pruner.last.get(trial.number, 1.0), stop))
                        if stop:
                            raise optuna.TrialPruned()
                if not running:
                    break
                time.sleep(0.2)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
        return float(read_records(out / "metrics.jsonl")[-1][VAL_PASS_RATE])

    study = optuna.create_study(direction="maximize", pruner=pruner)
    study.optimize(objective, n_trials=2)
    first, second = study.trials
    assert first.state.name == "COMPLETE" and len(first.intermediate_values) == 21  # steps 0, 3, ..., 60
    assert all(not stop for _, stop in answers[0])  # the first trial has nothing to beat
    # the second: every answer is its P(beat) against 0.05, and it never stops before 6 reports
    for i, (p, stop) in enumerate(answers[1]):
        assert stop == (i + 1 >= MIN_EVALS and p < 0.05)
    assert second.state.name in ("COMPLETE", "PRUNED") and (second.state.name == "PRUNED") == answers[1][-1][1]
