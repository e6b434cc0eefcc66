"""``scalerl.integrations.optuna.ForecastPruner``: scalerl's forecast as an Optuna pruner.

The rule is checked on written curves, where its answer is known, and inside a real Optuna
study whose trials are tiny ``scalerl train`` runs trained in process by ``objective``,
reported evaluation by evaluation as they are logged (a trial the pruner stops ends there)."""

from __future__ import annotations

import json

import numpy as np
import pytest

optuna = pytest.importorskip("optuna")

from scalerl.fit import law  # noqa: E402
from scalerl.fit.forecast.states import MIN_EVALS  # noqa: E402
from scalerl.integrations.optuna import ForecastPruner, _reports, objective, report  # noqa: E402

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
                                          ({"budget": 10, "threshold": 1.5}, "threshold must lie in"),
                                          ({"budget": "abc"}, "budget must be a positive number"),
                                          ({"budget": None}, "budget must be a positive number"),
                                          ({"budget": 10, "threshold": "x"}, "threshold must be a probability"),
                                          ({"budget": 10, "min_reports": "abc"}, "min_reports must be a whole number")])  # fmt: skip
def test_a_bad_setting_is_one_sentence(kw, says):
    with pytest.raises(ValueError, match=says):
        ForecastPruner(**kw)


def test_it_prunes_real_scalerl_runs_trained_in_process_as_trials(warm_model_dir, tmp_path):
    """Two real tiny runs through ``objective``, one after the other in one Optuna study: each
    evaluation is reported at its step as soon as it is logged, and a pruned trial's run stops
    at that evaluation, checkpointed. What the pruner answered at each report is asserted, not
    how a race between a run and its reports came out (there is none: one process)."""
    from scalerl.runfolder import read_records

    lrs = {0: 2e-4, 1: 1e-9}  # one that learns, one that cannot
    pruner = ForecastPruner(budget=30)
    answers: dict[int, list[tuple[float, bool]]] = {0: [], 1: []}
    sets = {"model.base": str(warm_model_dir), "task.knobs": "{min_digits: 1, max_digits: 2}",
            "pipeline.backend": "inprocess", "pipeline.prompts_per_step": 4, "pipeline.generations": 8,
            "sampling.max_new_tokens": 48, "length.interrupt_range": "[30, 36]", "train.steps": 30,
            "train.max_minutes": "null", "eval.every": 3, "eval.schedule": "every", "eval.num_prompts": 48,
            "eval.k": 1, "forecast.enabled": "false", "log.tensorboard": "false", "log.progress": "false",
            "train.cores": 2}  # fmt: skip

    def trial_fn(trial):
        should = trial.should_prune

        def watched():  # what the pruner said at each report
            stop = should()
            answers[trial.number].append((pruner.last.get(trial.number, 1.0), stop))
            return stop

        trial.should_prune = watched
        run = [f"{k}={v}" for k, v in {**sets, "optim.lr": lrs[trial.number]}.items()]
        return objective(trial, "scalerl", run, out=tmp_path / f"trial{trial.number}", log=lambda _: None)

    study = optuna.create_study(direction="maximize", pruner=pruner)
    study.optimize(trial_fn, n_trials=2)
    first, second = study.trials
    assert first.state.name == "COMPLETE" and len(first.intermediate_values) == 11  # steps 0, 3, ..., 30
    values = [first.intermediate_values[s] for s in (24, 27, 30)]
    assert first.value == pytest.approx(sum(values) / 3)  # the mean of its last three evaluations
    assert all(not stop for _, stop in answers[0])  # the first trial has nothing to beat
    for i, (p, stop) in enumerate(answers[1]):  # every answer is its P(beat) against 0.05, from the 6th report
        assert stop == (i + 1 >= MIN_EVALS and p < 0.05)
    assert (second.state.name == "PRUNED") == answers[1][-1][1]
    if second.state.name == "PRUNED":  # the run stopped at the evaluation that pruned it, checkpointed
        last = read_records(tmp_path / "trial1" / "metrics.jsonl")[-1]
        assert last["step"] == max(second.intermediate_values)
        assert last["stopped_early"] == f"pruned by Optuna at step {last['step']} (trial 1)"
        assert json.loads((tmp_path / "trial1" / "checkpoint" / "meta.json").read_text())["step"] == last["step"]


def test_a_trial_reporting_values_outside_zero_one_is_never_the_bar(caplog):
    """Reliability probe OP-poison-above1: a trial whose reports reach 2.2 used to finish and be
    the best, so every later trial was pruned at its sixth report, a better one included."""
    pruned: list = []
    ceilings = {0: 0.8, 1: 0.8, 2: 0.9}

    def objective_(trial):
        rng = np.random.default_rng(trial.number)
        for step in range(0, 101, 5):
            v = float(np.clip(law.sigmoid(max(step, 1), ceilings[trial.number], 1.5, 30.0, 0.1) + rng.normal(0, 0.01), 0, 1))
            v = 3 * v if trial.number == 1 else v  # trial 1: the same curve x3
            trial.report(v, step)
            if trial.should_prune():
                pruned.append(trial.number)
                raise optuna.TrialPruned()
        return v

    with caplog.at_level("INFO", logger="optuna.scalerl"):
        study = optuna.create_study(direction="maximize", pruner=ForecastPruner(budget=100))
        study.optimize(objective_, n_trials=3)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "COMPLETE"] and pruned == []
    said = [r.getMessage() for r in caplog.records]
    assert sum("trial 1 reported a value outside [0, 1]" in m for m in said) == 1  # one warning line
    # and at its first reports each trial is told when its first decision can come at its cadence
    assert any(m.startswith("ForecastPruner: trial 2 reports every 5, so its first decision can come at its 6th "
                            "report, about 25 (25% of the budget 100)") for m in said)


def test_reports_at_fractional_compute_keep_their_x():
    """Probe OP-steps-fractional: compute 0.5, 1.0, ..., 10 reported as steps kept 11 of 20."""
    seen = {}

    def objective_(trial):
        for i in range(1, 21):
            report(trial, 0.2 + 0.01 * i, 0.5 * i)
        seen["rows"] = _reports(trial.study.get_trials(deepcopy=False)[-1], 10.0)
        return 0.4

    optuna.create_study(direction="maximize", pruner=ForecastPruner(budget=10.0)).optimize(objective_, n_trials=1)
    rows = seen["rows"]
    assert rows.shape == (20, 2) and rows[:, 0].tolist() == [0.5 * i for i in range(1, 21)]
    with pytest.raises(ValueError, match="x must grow"):
        optuna.create_study().optimize(lambda t: (report(t, 0.1, 1.0), report(t, 0.2, 1.0), 0.0)[-1], n_trials=1,
                                       catch=())  # fmt: skip
