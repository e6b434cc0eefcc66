"""A live Optuna study of ``scalerl train`` runs: ``ForecastPruner`` beside Optuna's own pruners and
beside no pruning (issue 58's goal), side by side in one run.

    .venv/bin/python bench/optuna_live.py [--lrs 1e-9 5e-5 2e-4 6e-4] [--steps 80]

**The studies.** One learning rate per trial (``GridSampler``, one seeded order shared by every
study), each trial a real ``scalerl train`` run of ``--steps`` steps in this process through
``scalerl.integrations.optuna.objective``, reporting every evaluation of the default plan as it
is made:

- ``none`` (no pruning) and ``ForecastPruner(budget=steps)`` are run live, each trial trained;
- ``MedianPruner`` and ``HyperbandPruner`` are fed the ``none`` study's trials, report by report,
  in the same order (``trial.report`` / ``should_prune``, as Optuna runs them live): a pruned
  trial's compute is its steps up to the prune. A live run of theirs would train the same
  curves (the same seeds and configs) and differ only by the machine's run-to-run noise.

**Truth.** A trial's value is ``objective``'s (the mean of its last evaluations); the winner is
the best trial of ``none``. A pruner **keeps the winner** when its best finished trial is the
winner's learning rate; a **false stop** is a pruned trial whose ``none`` value is within
``WITHIN`` of the winner's. **Compute** is the steps the study trained over the ``none`` study's.

The machine's parallel scaling is printed first (two single-thread processes against one).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import optuna
from _workload import parallel_scaling

from scalerl.integrations.optuna import ForecastPruner, objective

WITHIN = 0.01


def _warm_base(root: Path) -> Path:
    """The recipe's own starting model, SFT-warmed once (as a sweep shares it): every trial of
    every study starts from the same weights, and no study pays for the warm-up."""
    from scalerl.config import load_config
    from scalerl.data.tasks import get_task
    from scalerl.pipeline.build import prepare_base_model

    cfg = load_config("scalerl", [])
    (root / "_base").mkdir(parents=True, exist_ok=True)
    return prepare_base_model(cfg, get_task(cfg.task.name, **cfg.task.knobs), root / "_base", log=print)


def _live(name: str, pruner, lrs: list[float], steps: int, root: Path, base: Path) -> dict:
    """A live study: each trial a scalerl run; the study and the steps each trial trained."""

    def trial_fn(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", min(lrs), max(lrs), log=True)
        return objective(trial, "scalerl", [f"model.base={base}", f"optim.lr={lr}", f"train.steps={steps}",
                                            "train.max_minutes=null", "log.progress=false"],
                         out=root / name / f"t{trial.number}", log=lambda *_: None)

    study = optuna.create_study(direction="maximize", pruner=pruner,
                                sampler=optuna.samplers.GridSampler({"lr": lrs}, seed=0))
    start = time.perf_counter()
    study.optimize(trial_fn, n_trials=len(lrs))
    trained = {t.params["lr"]: steps if t.state == optuna.trial.TrialState.COMPLETE else max(t.intermediate_values)
               for t in study.trials}  # a pruned trial stops at the report that pruned it
    return {"study": study, "trained": trained, "wall_s": time.perf_counter() - start}


def _replay(pruner, base: optuna.Study, steps: int) -> dict:
    """``base``'s trials, in its order, fed to ``pruner`` report by report."""
    study = optuna.create_study(direction="maximize", pruner=pruner)
    trained: dict[float, int] = {}
    for old in sorted(base.trials, key=lambda t: t.number):
        trial = study.ask()
        trial.set_user_attr("lr", old.params["lr"])  # the replayed trial's learning rate
        pruned = None
        for step, value in sorted(old.intermediate_values.items()):
            trial.report(value, step)
            if trial.should_prune():
                pruned = step
                break
        trained[old.params["lr"]] = pruned if pruned is not None else steps
        if pruned is None:
            study.tell(trial, old.value)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return {"study": study, "trained": trained, "wall_s": 0.0}


def _lr(trial: optuna.trial.FrozenTrial) -> float:
    return trial.params.get("lr", trial.user_attrs.get("lr"))


def _score(result: dict, base: optuna.Study, lrs: list[float], steps: int) -> dict:
    values = {_lr(t): t.value for t in base.trials}  # the truth: every trial run to the end
    winner = max(values, key=values.get)
    done = [t for t in result["study"].trials if t.state == optuna.trial.TrialState.COMPLETE]
    kept = bool(done) and _lr(max(done, key=lambda t: t.value)) == winner
    pruned = [_lr(t) for t in result["study"].trials if t.state == optuna.trial.TrialState.PRUNED]
    false = [lr for lr in pruned if values[lr] >= values[winner] - WITHIN]
    return {"compute": sum(result["trained"].values()) / (steps * len(lrs)), "kept": kept,
            "pruned": [f"{lr:g}@{result['trained'][lr]}" for lr in pruned], "false_stops": len(false),
            "wall_s": result["wall_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-9, 5e-5, 2e-4, 6e-4])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--keep", type=Path, help="keep the trials' run folders here")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"parallel scaling {parallel_scaling():.2f}x (two single-thread processes against one)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        warm = _warm_base(root)
        none = _live("none", optuna.pruners.NopPruner(), args.lrs, args.steps, root, warm)
        base = none["study"]
        for t in sorted(base.trials, key=lambda t: t.number):
            print(f"trial {t.number}: lr {t.params['lr']:g}, value {t.value:.3f}, "
                  f"{len(t.intermediate_values)} reports at steps {sorted(t.intermediate_values)}", flush=True)
        results = {"none": none,
                   "MedianPruner": _replay(optuna.pruners.MedianPruner(n_startup_trials=1), base, args.steps),
                   "HyperbandPruner": _replay(optuna.pruners.HyperbandPruner(min_resource=1, max_resource=args.steps),
                                              base, args.steps),
                   "ForecastPruner (live)": _live("forecast", ForecastPruner(budget=args.steps), args.lrs,
                                                  args.steps, root, warm)}
    print("\n| pruner | compute used | winner kept | false stops | pruned (lr@step) | wall s |\n|---|---|---|---|---|---|")
    for name, result in results.items():
        s = _score(result, base, args.lrs, args.steps)
        print(f"| {name} | {s['compute']:.0%} | {'yes' if s['kept'] else 'NO'} | {s['false_stops']} | "
              f"{', '.join(s['pruned']) or '-'} | {s['wall_s']:.0f} |")


if __name__ == "__main__":
    main()
