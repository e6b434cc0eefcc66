"""Train every (recipe, seed) variant of a sweep, resumably, into one output folder.

The paper's leave-one-out study (digest §3.3) trains ScaleRL and each variant that reverts
one axis, then fits Eq. 1 to every validation curve and compares A and B. This module is the
training half: ``plan`` lists the variants, ``run_sweep`` trains each into
``OUT/<recipe>/seed<k>`` and skips the ones already finished, so an interrupted sweep
continues where it stopped (an unfinished run resumes from its newest checkpoint).

Variants that start from the same model (same preset, architecture, task, SFT settings and
seed, and no ``model.base``) share one SFT warm-up, cached in ``OUT/_base/<key>``: the
leave-one-out axes never touch the starting weights, so they should not differ in them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.config import Config, ConfigError, load_config, recipe_names
from scalerl.runfolder import METRICS, SHARED_BASE, SWEEP, ended, read_records

BASELINE = "scalerl"


def loo_recipes() -> list[str]:
    """The ScaleRL recipe followed by every shipped leave-one-out variant (``loo-*``)."""
    return [BASELINE, *(n for n in recipe_names() if n.startswith("loo-"))]


@dataclass(frozen=True)
class Variant:
    """One run of a sweep: a recipe at some axis values and a seed."""

    recipe: str
    seed: int
    run_dir: Path
    config: Config
    values: tuple[tuple[str, Any], ...] = ()
    """``(axis, value)`` pairs of a spec sweep (``scalerl.experiments.spec``); empty otherwise."""

    @property
    def label(self) -> str:
        point = ",".join(f"{k}={v}" for k, v in self.values)
        return f"{self.recipe}{' ' + point if point else ''} seed {self.seed}"


def plan(recipes: Sequence[str], seeds: Sequence[int], overrides: Sequence[str], out: Path) -> list[Variant]:
    """One validated :class:`Variant` per (recipe, seed), before anything is trained, so a bad
    recipe or override fails the sweep at once instead of hours in."""
    if not recipes:
        raise ConfigError("the sweep has no recipes; name some or pass --loo.")
    stems = [Path(r).stem for r in recipes]
    if len(set(stems)) != len(stems):
        raise ConfigError(f"recipes repeat in {list(recipes)} (each trains into OUT/<its name>); "
                          "each may appear once.")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds repeat in {list(seeds)}; each may appear once.")
    variants = []
    for recipe in recipes:
        load_config(recipe, overrides)  # its errors name the recipe or the --set at fault
        for seed in seeds:
            try:
                cfg = load_config(recipe, [*overrides, f"train.seed={seed}"])
            except ConfigError as err:  # the seed is the sweep's own --set: name it as a seed
                raise ConfigError(f"recipe {recipe!r}: seed {seed} makes an invalid config "
                                  f"({config_reason(err)})") from None
            try:
                check_model(cfg)
            except ConfigError as err:
                raise ConfigError(f"recipe {recipe!r}: {err}") from None
            variants.append(Variant(recipe, seed, Path(out) / Path(recipe).stem / f"seed{seed}", cfg))
    return variants


def config_reason(err: ConfigError) -> str:
    """What is wrong with a config, without the source ``load_config`` guessed: the caller
    knows the real one (a sweep axis, a seed) and names it itself."""
    from pydantic import ValidationError

    cause = err.__cause__
    if not isinstance(cause, ValidationError):
        return str(err).rstrip(".")
    first = cause.errors()[0]
    key = ".".join(str(p) for p in first["loc"] if not isinstance(p, int))
    msg = first["msg"].removeprefix("Value error, ").rstrip(".")
    return f"{key}: {msg}" if key else msg


def check_model(cfg: Config) -> None:
    """Refuse a ``model.preset`` the model builder does not know before anything is made: the
    config accepts any name, and the builder's error would come when a point starts."""
    if cfg.model.base is not None:
        return
    from scalerl.models.build import PRESETS

    if cfg.model.preset not in PRESETS:
        raise ConfigError(f"model.preset {cfg.model.preset!r} (from the recipe or a set) is not a model "
                          f"preset; choose one of {', '.join(PRESETS)}")


def is_finished(run_dir: Path, cfg: Config) -> bool:
    """Whether the point's run ended (``runfolder.ended``: finished at its steps or compute, or
    stopped by a rule, the live forecast's decision a rerun must not undo)."""
    return ended(read_records(run_dir / METRICS), cfg.model_dump(mode="json")) is not None


def base_key(cfg: Config) -> str:
    """What the starting weights depend on; variants with equal keys share one SFT warm-up."""
    fields = {"model": {k: cfg.model.model_dump(mode="json")[k] for k in ("preset", "arch", "sft")},
              "task": cfg.task.model_dump(mode="json"), "seed": cfg.train.seed}
    text = json.dumps(fields, sort_keys=True)
    return f"{cfg.model.preset}-seed{cfg.train.seed}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def shared_base(cfg: Config, out: Path, log: Callable[[str], None]) -> Config:
    """``cfg`` pointed at the sweep's cached starting model (built and SFT-warmed once)."""
    if cfg.model.base is not None:
        return cfg
    from scalerl.data.tasks import get_task
    from scalerl.pipeline.build import prepare_base_model

    cache = Path(out) / SHARED_BASE / base_key(cfg)
    cache.mkdir(parents=True, exist_ok=True)
    model_dir = prepare_base_model(cfg, get_task(cfg.task.name, **cfg.task.knobs), cache, log)
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"base": str(model_dir)})})


def run_sweep(variants: Sequence[Variant], out: Path, *, train: Callable | None = None,
              log: Callable[[str], None] = print, parallel: int = 1, runner: str = "local") -> list[Path]:
    """Train every unfinished variant (resuming a started one); returns all run directories.

    Starting models are prepared first, one at a time (variants share them). Then the runs
    go one by one in this process (``parallel=1``), ``parallel`` at a time as ``scalerl
    train`` subprocesses (``runner="local"``), or as Ray tasks that Ray schedules by the CPUs
    each point needs (``runner="ray"``). ``train`` defaults to
    :func:`scalerl.pipeline.run.train` (tests pass a stand-in; it is used in-process only).
    """
    todo = []
    for i, v in enumerate(variants, start=1):
        label = f"[{i}/{len(variants)}] {v.label}"
        if is_finished(v.run_dir, v.config):
            log(f"{label}: already finished in {v.run_dir}, skipped")
            continue
        resume = _has_checkpoint(v.run_dir)
        _set_aside_orphan_metrics(v.run_dir, resume, log)
        todo.append((label, v.run_dir, shared_base(v.config, out, log), resume))
    execute(todo, parallel=parallel, runner=runner, train=train, log=log)
    return [v.run_dir for v in variants]


def execute(todo, *, parallel: int, runner: str, train: Callable | None = None,
            log: Callable[[str], None] = print) -> None:
    """Train ``todo`` (``runners.Todo``: label, run dir, config, resume): on Ray, as
    ``parallel`` subprocesses at a time, or one by one in this process."""
    if runner == "ray":
        from scalerl.experiments.runners import run_on_ray

        run_on_ray(todo, log)
    elif parallel > 1 and len(todo) > 1:
        from scalerl.experiments.runners import run_in_subprocesses

        run_in_subprocesses(todo, parallel, log)
    else:
        from scalerl.experiments.signals import requested

        if train is None:
            from scalerl.pipeline.run import train
        for label, run_dir, cfg, resume in todo:
            if requested():
                return
            log(f"{label}: {'resuming' if resume else 'training'} in {run_dir}")
            train(cfg, run_dir, resume=resume, log=log)


def _has_checkpoint(run_dir: Path) -> bool:
    from scalerl.checkpoint import latest_checkpoint

    return run_dir.is_dir() and latest_checkpoint(run_dir) is not None


def _set_aside_orphan_metrics(run_dir: Path, resume: bool, log: Callable[[str], None]) -> None:
    """A run killed before its first checkpoint restarts from step 0; its old records are
    renamed (kept, never deleted) so the new ``metrics.jsonl`` has each step once."""
    metrics = run_dir / METRICS
    if resume or not metrics.exists():
        return
    aside = metrics.with_name("metrics.before-restart.jsonl")
    metrics.replace(aside)
    log(f"{run_dir} had records but no checkpoint: restarting, old records kept in {aside.name}")


def claim_folder(out: Path, record: dict) -> None:
    """Record what ``out`` sweeps (``out/sweep.yaml``: recipes, seeds, overrides, axes), or
    refuse when it already holds a different sweep: points of two specs must not mix in one
    folder or one report."""
    import yaml

    from scalerl.yaml_io import load_yaml

    path = Path(out) / SWEEP
    if path.exists():
        try:
            held = load_yaml(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            held = {}
        if held != record:
            differs = sorted(str(k) for k in set(held) | set(record) if held.get(k) != record.get(k))
            raise ConfigError(f"{out} holds a different sweep (its sweep.yaml differs in {', '.join(differs)}); "
                              "use another --out, or the spec that made it")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(record, sort_keys=False))
