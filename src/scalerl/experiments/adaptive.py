"""``scalerl sweep SPEC --adaptive``: a study that stops the points that cannot win.

Every point trains to the first rung (``train.max_compute`` = the rung's compute), then the
policy of ``scalerl.fit.choose`` reads each running point's forecast at the budget and stops
the points whose P(best at the budget) fell below the threshold. The survivors resume to the
next rung, and so on up to the budget. On ``local`` the points of a rung run ``parallel`` at a
time, so a stopped point frees its cores for the survivors; on ``ray`` each point asks Ray for
its CPUs.

``OUT/decisions.json`` is written atomically after every rung (``scalerl.fit.choose.Decisions``:
the winner, the compute used against the study run to the end, and each stopped point with
its forecast at the budget, its P(best) and the reason), so a killed study keeps what it
decided. A rerun continues: a point stopped before stays stopped, and a point already past a
rung is not trained again.

A point is one (recipe, axis values, seed): seeds are not pooled, so a study of several seeds
per setting keeps each seed's run, and seeds of one setting end tied.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from scalerl.fit.choose import MAX_RUNGS, MIN_ETA, PAIRING, PAIRINGS
from scalerl.fit.forecast.states import MIN_EVALS
from scalerl.runfolder import DECISIONS

CADENCE_EVALS = MIN_EVALS + 2
"""Evaluations the first rung holds at least (``cadence``): ``MIN_EVALS`` (6) for a forecast,
and two to spare for the step 0 evaluation and a step that lands past the rung."""


class Adaptive(BaseModel):
    """How an adaptive study decides (the spec's ``adaptive`` section), validated as the config
    is: every field finite, ``budget`` and ``first_rung`` positive computes, ``threshold`` a
    probability, ``eta`` at least ``choose.MIN_ETA`` (1.5), and at most ``choose.MAX_RUNGS``
    (12) rungs: ``eta`` 1.0000001 once made 20.8 million."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    budget: float = Field(gt=0)
    """Compute per point (the fits' x, ``compute_gpu_hours``) the study is judged at."""
    first_rung: float | None = Field(None, gt=0)
    """The first decision's compute (None: budget / 8)."""
    threshold: float | None = Field(None, gt=0, lt=1)
    """Stop a point below this P(best at the budget) (None: ``scalerl.fit.choose.THRESHOLD``)."""
    eta: float | None = Field(None, ge=MIN_ETA)
    """Each rung is this many times the one before (None: ``scalerl.fit.choose.ETA``)."""
    confirm: int = Field(1, ge=1, le=3)
    """Rungs in a row a point must be a stop for before it is stopped (2: the certified
    pruner's guard, the early ranking agreeing with itself; ``bench/pruners.py`` measures both)."""
    pairing: str = PAIRING
    """How P(best) pairs the points' draws: one of ``scalerl.fit.choose.PAIRINGS`` ("independent";
    "shared-shape": by one fit of all the points with one shape)."""

    @field_validator("pairing")
    @classmethod
    def _pairing(cls, v: str) -> str:
        if v not in PAIRINGS:
            raise ValueError(f"{v!r} is not a pairing; choose one of {', '.join(PAIRINGS)}")
        return v

    @model_validator(mode="after")
    def _rungs(self) -> Adaptive:
        first = self.budget / 8.0 if self.first_rung is None else self.first_rung
        if first > self.budget:
            raise ValueError(f"the first rung ({first:g}) must be a positive compute no larger than the budget "
                             f"({self.budget:g})")  # fmt: skip
        eta = 2.0 if self.eta is None else self.eta
        n = math.ceil(math.log(self.budget / first) / math.log(eta) - 1e-9) + 1
        if n > MAX_RUNGS:
            raise ValueError(f"the first rung {first:g} with eta {eta:g} makes {n} rungs to the budget "
                             f"{self.budget:g}, more than {MAX_RUNGS}; raise first_rung or eta")  # fmt: skip
        return self

    @classmethod
    def checked(cls, data: dict, where: str = "adaptive") -> Adaptive:
        """``data`` as an ``Adaptive``; a mistake is one ``ConfigError`` sentence naming the key."""
        from scalerl.config import ConfigError

        try:
            return cls.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            msg = first["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{where}{': ' + key if key else ''}: {msg}") from None


ADAPTIVE_KEYS = tuple(Adaptive.model_fields)
"""The keys of a spec's ``adaptive`` section: ``Adaptive``'s fields."""


def point_name(run_dir: Path, out: Path) -> str:
    """A point's name: its run folder under the sweep folder (``scalerl/lr=1e-4/seed0``)."""
    return run_dir.relative_to(out).as_posix()


def _log(run_dir: Path, name: str, x: str | None):
    """The point's log so far (its validation and training reward), read from its run folder
    as ``plan`` reads it (its ``config.yaml`` with it); None before its first evaluation. A log
    that cannot be read is one ``CurveError`` sentence naming it."""
    import dataclasses

    from scalerl.fit.forecast import read_logs
    from scalerl.fit.readers import Columns
    from scalerl.runfolder import METRICS, VAL_PASS_RATE, read_records

    metrics = run_dir / METRICS
    if not metrics.is_file() or not any(r.get(VAL_PASS_RATE) is not None for r in read_records(metrics)):
        return None
    (log,) = read_logs([run_dir], Columns(x=x))
    return dataclasses.replace(log, curve=dataclasses.replace(log.curve, name=name))


def _through(log, rung: float) -> float:
    """The compute of the point's first evaluation at or past ``rung`` (``choose.through``)."""
    from scalerl.fit.choose import through

    seen = through(log.curve, rung)
    return float(seen.compute[-1])


def _previous(out: Path) -> set[str]:
    """The points an earlier session of this study stopped (its ``decisions.json``)."""
    path = out / DECISIONS
    if not path.is_file():
        return set()
    try:
        return {s["point"] for s in json.loads(path.read_text()).get("stopped", [])}
    except (OSError, ValueError, TypeError, KeyError):
        return set()


def cadence(adaptive: Adaptive) -> float:
    """The evaluation cadence in compute (``eval.every_compute``) that gives the first rung
    ``CADENCE_EVALS`` evaluations, so that every rung holds enough for a forecast
    (``choose.MIN_EVALS``); later rungs, larger, hold more."""
    first = adaptive.budget / 8.0 if adaptive.first_rung is None else adaptive.first_rung
    return first / CADENCE_EVALS


def with_cadence(cfg, every: float, name: str):
    """``cfg`` with ``eval.every_compute`` at most ``every``; a point whose own setting is
    coarser is refused in one sentence (its rungs could not be decided)."""
    from scalerl.config import ConfigError

    own = cfg.eval.every_compute
    if own is not None and own > every * (1 + 1e-9):
        raise ConfigError(f"point {name}: eval.every_compute = {own:g} gives its first rung fewer than "
                          f"{CADENCE_EVALS} evaluations; set it to {every:.4g} or less, or leave it unset")  # fmt: skip
    return cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"every_compute": own or every})})


def _reached(run_dir: Path, rung: float) -> bool:
    """Whether the point already trained to ``rung``: its last step, or the next at its median
    step's compute, is at or past it (``train.max_compute`` ends a run before a step that would
    pass it)."""
    from scalerl.experiments.sizing import Costs
    from scalerl.runfolder import COMPUTE, METRICS, number, read_records

    records = read_records(run_dir / METRICS) if (run_dir / METRICS).is_file() else []
    last = next((v for r in reversed(records) if (v := number(r, COMPUTE)) is not None), None)
    costs = Costs.of(records, 1.0, "")
    return last is not None and last + (costs.step if costs else 0.0) >= rung * (1 - 1e-9)


def _sized(first, out: Path, adaptive: Adaptive, rung: float, force: bool, train, log) -> None:
    """Train ``first`` (name, variant, config) to the first rung alone and check that the study
    can decide at the costs it measured (``sizing``): one sentence and exit 2 if not."""
    from scalerl.experiments.sizing import check_size
    from scalerl.experiments.sweep import _has_checkpoint, execute, shared_base
    from scalerl.runfolder import METRICS, read_placement, read_records

    name, v, cfg = first
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"max_compute": rung})})
    log(f"{name}: its first rung alone first, to measure what a step and an evaluation cost")
    execute([(f"{name} to compute {rung:.4g}", v.run_dir, shared_base(cfg, out, log), _has_checkpoint(v.run_dir))],
            parallel=1, runner="local", train=train, log=log)  # fmt: skip
    devices = (read_placement(v.run_dir).get("plan") or {}).get("devices") or 1
    first_rung = adaptive.budget / 8.0 if adaptive.first_rung is None else adaptive.first_rung
    check_size(read_records(v.run_dir / METRICS), float(devices), name, budget=adaptive.budget,
               first_rung=first_rung, share=cfg.eval.share, evals=CADENCE_EVALS, force=force, log=log)  # fmt: skip


def run_adaptive(variants: Sequence, out: Path, adaptive: Adaptive, *, parallel: int, runner: str,
                 x: str | None = None, train: Callable | None = None, log: Callable[[str], None] = print,
                 force: bool = False):
    """Train ``variants`` (``sweep.Variant``) rung by rung, stopping the points that cannot win;
    returns the ``Decisions``, also written to ``OUT/decisions.json``. Each rung prints one line
    per point (stopped, kept or undecided, with the reason), as ``decisions.json`` keeps them.
    A new study first trains its first point's first rung alone and refuses a budget that cannot
    decide at the costs measured there (``sizing``), unless ``force``."""
    from scalerl.experiments.replay import write_json
    from scalerl.experiments.sweep import _has_checkpoint, execute, is_finished, shared_base
    from scalerl.fit.choose import ETA, THRESHOLD, Study
    from scalerl.fit.forecast.prior_runs import run_options
    from scalerl.runfolder import write_status

    threshold = THRESHOLD if adaptive.threshold is None else adaptive.threshold
    every = cadence(adaptive)
    by_name = {point_name(v.run_dir, out): v for v in variants}
    configs = {n: with_cadence(v.config, every, n) for n, v in by_name.items()}
    study = Study(list(by_name), adaptive.budget, first_rung=adaptive.first_rung,
                  eta=ETA if adaptive.eta is None else adaptive.eta, threshold=threshold,
                  confirm=adaptive.confirm, pairing=adaptive.pairing,
                  options_of=lambda name, log: run_options(log, by_name[name].run_dir, x=x))  # fmt: skip
    study.decisions.compute_full = adaptive.budget * len(by_name)  # the same study run to the end
    log(f"adaptive study: {len(by_name)} points judged at compute {adaptive.budget:g} each, rungs at "
        f"{', '.join(f'{r:.4g}' for r in study.decisions.rungs)}; a point stops once P(best at the budget) "
        f"< {threshold:g} ({adaptive.confirm} rung(s) in a row; draws paired: {adaptive.pairing}); every point validates at least every "
        f"{every:.4g} compute (eval.every_compute) so that each rung holds {CADENCE_EVALS} evaluations or more")  # fmt: skip
    earlier = _previous(out)
    if len(by_name) > 1 and not (out / DECISIONS).is_file():
        first = next(iter(by_name))
        study.under_way(study.decisions.rungs[0], [first])
        write_json(study.finish(done=False).to_dict(), out / DECISIONS)
        _sized((first, by_name[first], configs[first]), out, adaptive, study.decisions.rungs[0], force, train, log)
    for rung in study.decisions.rungs:
        todo = []
        for name in study.alive:
            v = by_name[name]
            seen = _log(v.run_dir, name, x)
            if name in earlier or is_finished(v.run_dir, v.config) or (
                    seen is not None and _reached(v.run_dir, rung)):
                continue
            cfg = configs[name]
            cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"max_compute": rung})})
            todo.append((f"{name} to compute {rung:.4g}", v.run_dir, shared_base(cfg, out, log),
                         _has_checkpoint(v.run_dir)))  # fmt: skip
        study.under_way(rung, [t[0].split(" to compute ")[0] for t in todo])
        write_json(study.finish(done=False).to_dict(), out / DECISIONS)
        execute(todo, parallel=parallel, runner=runner, train=train, log=log)
        logs = {n: g for n in study.alive if (g := _log(by_name[n].run_dir, n, x)) is not None}
        stops = study.step(rung, {n: g.upto(_through(g, rung)) for n, g in logs.items()})
        for line in study.decisions.rounds[-1]["lines"]:
            log(line)
        for stop in stops:
            write_status(by_name[stop["point"]].run_dir, "stopped", f"the study stopped it: {stop['reason']}")
        if rung < adaptive.budget:
            for name in study.alive:
                write_status(by_name[name].run_dir, "paused", f"between rungs: trained to compute {rung:.4g} of "
                                                               f"the study's {adaptive.budget:.4g}")  # fmt: skip
        write_json(study.finish(done=rung >= adaptive.budget).to_dict(), out / DECISIONS)
    return study.finish()
