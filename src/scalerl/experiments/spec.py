"""``scalerl sweep SPEC.yaml``: a grid of recipes × seeds × scaling axes, read and validated.

A spec, every key but ``recipes`` optional::

    name: batch-size            # what the sweep studies (used in its report)
    recipes: [scalerl]          # recipe names or YAML paths
    seeds: [0, 1, 2]
    set:                        # overrides applied to every point (``--set`` syntax, as a mapping)
      train.steps: 120
    axes:                       # the grid: every combination of the listed values is one point
      batch: [4, 16]            # prompts per step (the batch size)
      length: [48, 80]          # the generation budget, with the interruption range scaled alike
      generations: [4, 8]       # completions per prompt at a fixed total batch
      model: [nano, micro]      # model preset (model size)
      lr: [1.0e-5, 1.0e-4]      # the peak learning rate (optim.lr)
    parallel: auto              # points trained at once ("auto": as the machine's cores allow)
    runner: local               # local subprocesses, or ray (Ray schedules the points)
    adaptive:                   # with `scalerl sweep --adaptive`: stop the points that cannot win
      budget: 0.05              # compute per point (compute_gpu_hours) the study is judged at
      first_rung: 0.00625       # the first decision (default budget / 8); then x eta (2) up to the budget
      threshold: 0.05           # stop a point once P(it is the best at the budget) falls below this

Each point trains into ``OUT/<recipe>/<axis>=<value>,.../seed<k>`` (``OUT/<recipe>/seed<k>``
without axes). Every mistake is one :class:`~scalerl.config.ConfigError` sentence naming the
spec file, the key and its line: an unknown key or axis, an empty grid, a recipe that does
not exist, a value of the wrong type, or a point whose config does not validate.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scalerl.config import Config, ConfigError, load_config
from scalerl.experiments.adaptive import ADAPTIVE_KEYS, Adaptive
from scalerl.experiments.sweep import Variant, check_model, config_reason
from scalerl.yaml_io import load_yaml


@dataclass(frozen=True)
class Axis:
    """One scaling axis: what its value means, and the overrides it becomes."""

    help: str
    kind: type
    overrides: Callable[[Any, Config], list[str]]
    check: Callable[[Any], str | None] = lambda value: None
    """Why a value cannot be a point (checked when the spec is read), or None."""


def _model_preset(value: str) -> str | None:
    """The config accepts any preset name, and the model builder refuses an unknown one only
    when a point starts training: hours in, after the sweep folder was made."""
    from scalerl.models.build import PRESETS

    return None if value in PRESETS else f"unknown model preset {value!r}; choose one of {', '.join(PRESETS)}"


def _length(value: int, base: Config) -> list[str]:
    """The generation budget ``L`` with the interruption range scaled by ``L / L_base``."""
    lo, hi = base.length.interrupt_range
    scale = value / base.sampling.max_new_tokens
    new_hi = min(value - 1, max(1, round(hi * scale)))
    return [f"sampling.max_new_tokens={value}", f"length.interrupt_range=[{min(new_hi, max(1, round(lo * scale)))}, {new_hi}]"]


def _generations(value: int, base: Config) -> list[str]:
    """G completions per prompt with P·G held at the base recipe's total."""
    total = base.pipeline.prompts_per_step * base.pipeline.generations
    if total % value:
        raise ValueError(f"generations={value} does not divide the total batch {total} "
                         f"(prompts_per_step x generations of the base recipe)")
    prompts = total // value
    return [f"pipeline.generations={value}", f"pipeline.prompts_per_step={prompts}",
            f"pipeline.prompts_per_chunk={min(prompts, base.pipeline.prompts_per_chunk)}"]


AXES: dict[str, Axis] = {
    "batch": Axis("prompts per optimiser step", int,
                  lambda v, base: [f"pipeline.prompts_per_step={v}",
                                   f"pipeline.prompts_per_chunk={min(v, base.pipeline.prompts_per_chunk)}"]),
    "length": Axis("generation budget in tokens, interruption range scaled alike", int, _length),
    "generations": Axis("completions per prompt at a fixed total batch", int, _generations),
    "model": Axis("model size preset", str, lambda v, base: [f"model.preset={v}"], _model_preset),
    "lr": Axis("peak learning rate (optim.lr)", float, lambda v, base: [f"optim.lr={float(v)!r}"],
               lambda v: None if v > 0 else f"a learning rate must be positive, got {v!r}"),
}
KEYS = ("name", "recipes", "seeds", "set", "axes", "parallel", "runner", "adaptive")
RUNNERS = ("local", "ray")


@dataclass(frozen=True)
class SweepSpec:
    name: str
    recipes: tuple[str, ...]
    seeds: tuple[int, ...]
    overrides: tuple[str, ...]
    axes: tuple[tuple[str, tuple], ...]
    parallel: int | None  # None: auto
    runner: str
    source: str
    axis_at: tuple[tuple[str, str], ...] = ()
    """``(axis, "FILE line N, 'axes.NAME'")``: where each axis is written, for messages."""
    adaptive: Adaptive | None = None
    """The ``adaptive`` section: how ``--adaptive`` decides (``scalerl.experiments.adaptive``)."""

    def at(self, axis: str) -> str:
        """Where ``axis`` is written in the spec (file, line and key)."""
        return dict(self.axis_at).get(axis, f"{self.source}, 'axes.{axis}'")

    def to_dict(self) -> dict:
        """The spec as plain data (what ``OUT/sweep.yaml`` records)."""
        return {"name": self.name, "recipes": list(self.recipes), "seeds": list(self.seeds),
                "set": list(self.overrides), "axes": {k: list(v) for k, v in self.axes}}


def _lines(text: str) -> dict[tuple[str, ...], int]:
    """1-based line of every mapping key (and of each axis) in the YAML text."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node, path):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                lines[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value))

    try:
        walk(yaml.compose(text), ())
    except yaml.YAMLError:
        pass
    return lines


def _typed(where: str, value, kind: type, what: str):
    if kind is float and isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    ok = isinstance(value, (int, float) if kind is float else kind) and not isinstance(value, bool)
    if not ok:
        names = {int: "an integer", float: "a number", str: "a string"}
        raise ConfigError(f"{where}: {what} must be {names[kind]}; got {value!r}")
    return value


def _unique(where: str, values, what: str) -> None:
    """Two equal values would train two points into one folder."""
    repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if repeated is not None:
        raise ConfigError(f"{where}: the {what} {repeated!r} repeats; each may appear once")


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check ``path``; every problem is one ConfigError sentence with its line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = load_yaml(text)  # the recipe reader's bounds: aliases, depth, repeated keys
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path} line {mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML ({err.problem or err.context})") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        why = getattr(err, "strerror", None) or (str(err).splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"cannot read the sweep spec {path} ({why})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a sweep spec is a mapping with at least 'recipes'")
    lines = _lines(text)

    def at(*key: str) -> str:
        line = lines.get(key)
        return f"{path} line {line}, '{'.'.join(key)}'" if line else f"{path}, '{'.'.join(key)}'"

    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise ConfigError(f"{at(str(unknown[0]))}: unknown key; a spec has {', '.join(KEYS)}")
    recipes = data.get("recipes")
    if not isinstance(recipes, list) or not recipes:
        raise ConfigError(f"{at('recipes')}: give a non-empty list of recipe names or paths")
    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{at('seeds')}: give a non-empty list of integer seeds")
    sets = data.get("set") or {}
    if not isinstance(sets, dict):
        raise ConfigError(f"{at('set')}: give a mapping of config keys to values")
    axes = data.get("axes") or {}
    if not isinstance(axes, dict):
        raise ConfigError(f"{at('axes')}: give a mapping of axis names to lists of values")
    for name, values in axes.items():
        if name not in AXES:
            raise ConfigError(f"{at('axes', str(name))}: unknown axis {name!r}; known axes: {', '.join(AXES)}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{at('axes', name)}: the grid is empty; give a non-empty list of values")
        axes[name] = values = [_typed(at("axes", name), v, AXES[name].kind, f"each {name} value") for v in values]
        for v in values:
            why = AXES[name].check(v)
            if why:
                raise ConfigError(f"{at('axes', name)}: {why}")
        _unique(at("axes", name), values, f"{name} value")
    parallel = data.get("parallel", "auto")
    if parallel != "auto" and (isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1):
        raise ConfigError(f"{at('parallel')}: 'auto' or a positive integer; got {parallel!r}")
    runner = data.get("runner", "local")
    if runner not in RUNNERS:
        raise ConfigError(f"{at('runner')}: one of {', '.join(RUNNERS)}; got {runner!r}")
    recipes = [_typed(at("recipes"), r, str, "each recipe") for r in recipes]
    _unique(at("recipes"), [Path(r).stem for r in recipes], "recipe name")
    seeds = [_typed(at("seeds"), s, int, "each seed") for s in seeds]
    _unique(at("seeds"), seeds, "seed")
    return SweepSpec(
        name=str(data.get("name") or path.stem),
        recipes=tuple(recipes),
        seeds=tuple(seeds),
        overrides=tuple(f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
                        for k, v in sets.items()),
        axes=tuple((k, tuple(v)) for k, v in axes.items()),
        parallel=None if parallel == "auto" else parallel, runner=runner, source=str(path),
        axis_at=tuple((k, at("axes", k)) for k in axes), adaptive=_adaptive(data.get("adaptive"), at))


def _adaptive(data, at: Callable[..., str]) -> Adaptive | None:
    """The ``adaptive`` section, checked by ``Adaptive``'s schema: a finite positive budget, a
    first rung within it, a threshold in (0, 1), a rung factor of at least 1.5, at most 12
    rungs and a pairing of ``choose.PAIRINGS``."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"{at('adaptive')}: give a mapping with at least 'budget'")
    unknown = [k for k in data if k not in ADAPTIVE_KEYS]
    if unknown:
        raise ConfigError(f"{at('adaptive', str(unknown[0]))}: unknown key; adaptive has {', '.join(ADAPTIVE_KEYS)}")
    if "budget" not in data:
        raise ConfigError(f"{at('adaptive')}: give 'budget', the compute per point the study is judged at")
    for key, value in data.items():
        if key == "pairing":  # the one named choice: ``Adaptive`` checks it against its registry
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{at('adaptive', key)}: {key} must be a number; got {value!r}")
    return Adaptive.checked(dict(data), at("adaptive"))


def points(spec: SweepSpec, out: Path, extra: tuple[str, ...] = ()) -> list[Variant]:
    """Every (recipe, axis values, seed) of ``spec``, each config validated before training."""
    grid = list(itertools.product(*(values for _, values in spec.axes)))
    names = [name for name, _ in spec.axes]
    out_points = []
    for recipe in spec.recipes:
        sets = [*spec.overrides, *extra]
        try:
            base = load_config(recipe, sets)
        except ConfigError as err:
            raise ConfigError(f"{spec.source}, recipe {recipe!r}: {err}") from None
        for combo in grid:
            values = tuple(zip(names, combo))
            per_axis = [_axis_sets(spec, name, value, base) for name, value in values]
            label = ",".join(f"{k}={v}" for k, v in values)
            for seed in spec.seeds:
                point_sets = [*sets, *(o for axis in per_axis for o in axis)]
                try:
                    cfg = load_config(recipe, [*point_sets, f"train.seed={seed}"])
                except ConfigError as err:
                    raise _blame(spec, recipe, sets, values, per_axis, seed, err) from None
                try:
                    check_model(cfg)  # an axis value was checked at load: the preset is the recipe's or a set's
                except ConfigError as err:
                    raise ConfigError(f"{spec.source}, recipe {recipe!r}: {err}") from None
                run_dir = Path(out) / Path(recipe).stem / label / f"seed{seed}"
                out_points.append(Variant(recipe, seed, run_dir, cfg, values))
    _distinct_folders(out_points, spec.source)
    return out_points


def _axis_sets(spec: SweepSpec, name: str, value, base: Config) -> list[str]:
    try:
        return AXES[name].overrides(value, base)
    except ValueError as err:
        raise ConfigError(f"{spec.at(name)}: {err}") from None


def _blame(spec: SweepSpec, recipe: str, sets: list[str], values, per_axis, seed: int,
           err: ConfigError) -> ConfigError:
    """The error of a point that does not validate, naming what made it so: one axis value
    (its line in the spec), the seed, or the axis values together. ``load_config`` can only
    name the ``--set`` it saw last, and the sweep passed every one of these as a ``--set``."""
    for (name, value), axis_sets in zip(values, per_axis):
        try:
            load_config(recipe, [*sets, *axis_sets])
        except ConfigError as one:
            return ConfigError(f"{spec.at(name)}: the {name} value {value!r} makes recipe {recipe!r} "
                               f"invalid ({config_reason(one)})")
    label = ",".join(f"{k}={v}" for k, v in values) or "(no axes)"
    try:
        load_config(recipe, [*sets, *(o for axis in per_axis for o in axis)])
    except ConfigError:
        return ConfigError(f"{spec.source}, point {recipe} {label}: these axis values together make an "
                           f"invalid config ({config_reason(err)})")
    return ConfigError(f"{spec.source}, point {recipe} {label}: seed {seed} makes an invalid config "
                       f"({config_reason(err)})")


def _distinct_folders(variants: list[Variant], source: str) -> None:
    """One folder per point: a repeated seed or value would train two runs into one."""
    seen: dict[Path, Variant] = {}
    for v in variants:
        if v.run_dir in seen:
            raise ConfigError(f"{source}: {seen[v.run_dir].label} and {v.label} would both train into "
                              f"{v.run_dir}; give each recipe name, seed and axis value once")
        seen[v.run_dir] = v
