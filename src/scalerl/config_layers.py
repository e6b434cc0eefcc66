"""Recipe files and ``--set`` overrides as layers of one mapping (``scalerl.config`` validates it).

A recipe may ``extends:`` another by name (``src/scalerl/recipes/NAME.yaml``) or by path; each
layer is deep-merged over the one before (``task.knobs`` is replaced whole, never merged).
``--set key.sub=value`` values are YAML scalars; the overrides are merged last and, for the
task switch, count as one layer, so their order is free. A layer that switches ``task.name``
without giving ``task.knobs`` starts from the new task's own knobs. Unreadable, non-UTF-8 or
invalid YAML files and malformed overrides raise :class:`ConfigError` with one sentence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

RECIPE_DIR = Path(__file__).parent / "recipes"

Layers = list[tuple[str, dict[str, Any]]]


class ConfigError(ValueError):
    """A bad recipe or override; the message is one sentence naming the key and its source."""


def recipe_names() -> list[str]:
    """Names of the recipes shipped in ``scalerl/recipes``."""
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def resolve_recipe(name_or_path: str | Path) -> Path:
    """A recipe name (``scalerl``, ``loo-dapo``) or a YAML path -> the file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"recipe file {path} does not exist.")
        return path
    shipped = RECIPE_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        raise ConfigError(
            f"unknown recipe {name_or_path!r}; choose one of {', '.join(recipe_names())} or give a YAML path."
        )
    return shipped


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        line = err.object[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path} line {line} is not UTF-8 text (byte 0x{err.object[err.start]:02x}).") from None
    except OSError as err:
        raise ConfigError(f"cannot read {path} ({err.strerror or err}).") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where} is not valid YAML ({getattr(err, 'problem', err)}).") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys, not {type(data).__name__}.")
    return data


def _layers(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[str, dict[str, Any]]]:
    """(source, mapping) from the root ancestor down to ``path``; ``extends`` is consumed."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path} extends itself through a cycle of recipes.")
    data = _read_yaml(path)
    parent = data.pop("extends", None)
    layers = _layers(resolve_recipe(parent), (*seen, path)) if parent else []
    return [*layers, (str(path), data)]


def _task_switch(base: dict[str, Any], over: dict[str, Any], default_task: str) -> dict[str, Any]:
    """``over`` with ``task.knobs: {}`` added when it switches the task without naming knobs."""
    task = over.get("task")
    if not isinstance(task, dict) or "name" not in task or "knobs" in task:
        return over
    prev = base.get("task")
    old = prev.get("name", default_task) if isinstance(prev, dict) else default_task
    return over if task["name"] == old else {**over, "task": {**task, "knobs": {}}}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "knobs":
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> tuple[str, dict[str, Any]]:
    """``"optim.lr=1e-4"`` -> ``("optim.lr", {"optim": {"lr": 1e-4}})``; the value is YAML-typed."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r} must look like key.sub=value.")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r} has an empty key part.")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    # YAML reads 1e-4 as a string (no dot); floats must stay floats
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in "eE.") else value
        except ValueError:
            pass
    nested: dict[str, Any] = value
    for part in reversed(key.split(".")):
        nested = {part: nested}
    return key, nested


def merged_layers(
    recipe: str | Path | None, overrides: list[str] | tuple[str, ...], default_task: str
) -> tuple[Layers, dict[str, Any]]:
    """``(layers as (source, mapping), their merge)`` of a recipe and its ``--set`` overrides."""
    layers = _layers(resolve_recipe(recipe)) if recipe is not None else []
    merged: dict[str, Any] = {}
    for _, data in layers:
        merged = _merge(merged, _task_switch(merged, data, default_task))
    sets: dict[str, Any] = {}  # one layer for the task switch: the order of --set is free
    for text in overrides:
        key, nested = parse_override(text)
        layers.append((f"--set {key}", nested))
        sets = _merge(sets, nested)
    return layers, _merge(merged, _task_switch(merged, sets, default_task))
