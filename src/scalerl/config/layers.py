"""Recipe files and ``--set`` overrides as layers of one mapping (``scalerl.config`` validates it).

A recipe may ``extends:`` one other recipe, by name (``src/scalerl/recipes/NAME.yaml``) or by
path; a relative path is read from the extending file's folder (not the working directory, so a
recipe means the same wherever it is run from). ``extends`` must be one non-empty name: a
number, a list, an empty value or a folder is refused, and a missing parent is named with the
recipe that extends it. Each layer is deep-merged over the one before; ``task.knobs`` given
in a layer replaces the knobs whole, never merged.

``--set key.sub=value`` values are YAML scalars. Every override is applied, by its path, over
the merged recipe before anything is validated, so two overrides that only make sense together
(``task.knobs.path`` and ``task.knobs.problem_field``) are checked together. A dotted override
into a mapping sets that one key and keeps the others (``--set task.knobs.max_digits=4`` keeps
the recipe's ``min_digits``); a whole mapping (``--set train={steps: 4}``) merges into a section
but replaces ``task.knobs``, as in a recipe. For the task switch the overrides count as one
layer, so their order is free: a layer that switches ``task.name`` without giving ``task.knobs``
starts from the new task's own knobs.

Every path a layer names is made absolute before the layers merge: against the recipe file's
folder for a recipe, against the working folder for a ``--set`` (``scalerl.config.paths``).

Files and values are read by ``scalerl.yaml_io`` (bounded aliases and nesting, no repeated
keys, plain tags only). Unreadable, non-UTF-8, invalid or refused YAML and malformed overrides
raise :class:`ConfigError` with one sentence naming the file and line, or the ``--set``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scalerl.config.paths import absolute_layer
from scalerl.yaml_io import RecipeYAMLError, load_yaml

RECIPE_DIR = Path(__file__).parents[1] / "recipes"

Layers = list[tuple[str, dict[str, Any]]]

MAX_EXTENDS = 32
"""Longest chain of ``extends`` (the shipped recipes use two)."""


class ConfigError(ValueError):
    """A bad recipe or override; the message is one sentence naming the key and its source."""


def recipe_names() -> list[str]:
    """Names of the recipes shipped in ``scalerl/recipes``."""
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def shadows_recipe(name_or_path: str | Path, folder: Path | None = None) -> bool:
    """A bare name of a shipped recipe that is also a folder where it is read (``scalerl``
    beside the clone of the same name): the shipped recipe is meant."""
    text = str(name_or_path)
    return (folder is None and "/" not in text and Path(text).suffix == "" and text in recipe_names()
            and Path(text).is_dir())  # fmt: skip


def resolve_recipe(name_or_path: str | Path, folder: Path | None = None, extended_by: Path | None = None) -> Path:
    """A recipe name (``scalerl``, ``loo-dapo``) or a YAML path -> the file.

    A relative path is taken from ``folder`` (the extending recipe's folder) when given;
    ``extended_by`` names that recipe in the sentence when the file is missing.
    """
    path = Path(name_or_path)
    if folder is not None and not path.is_absolute():
        path = folder / path
    by = f", which {extended_by} extends," if extended_by is not None else ""
    if shadows_recipe(name_or_path, folder):  # the built-in recipe wins over a folder of its name
        return RECIPE_DIR / f"{name_or_path}.yaml"
    try:
        is_path = path.suffix in (".yaml", ".yml") or path.exists()
        if is_path and path.is_dir():
            raise ConfigError(f"recipe file {path}{by} is a folder, not a YAML file.")
        if is_path and not path.is_file():
            raise ConfigError(f"recipe file {path}{by} does not exist.")
    except OSError as err:  # a name too long for the file system, a path through a file
        raise ConfigError(f"recipe {str(name_or_path)!r}{by} cannot be read ({err.strerror or err}).") from None
    if is_path:
        return path
    shipped = RECIPE_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        raise ConfigError(
            f"unknown recipe {str(name_or_path)!r}{by}; choose one of {', '.join(recipe_names())} or give a YAML path."
        )
    return shipped


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        line = err.object[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path} line {line} is not UTF-8 text (byte 0x{err.object[err.start]:02x}).") from None
    except OSError as err:
        raise ConfigError(f"cannot read {path} ({err.strerror or err}).") from None
    except RecipeYAMLError as err:
        where = f" line {err.problem_mark.line + 1}" if err.problem_mark is not None else ""
        raise ConfigError(f"{path}{where}: {err.problem}.") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())  # one line
        raise ConfigError(f"{path}{where} is not valid YAML ({problem}).") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys, not {type(data).__name__}.")
    return data


def _parent(path: Path, data: dict[str, Any]) -> Path | None:
    """The recipe ``path`` extends (``extends`` is consumed), or None."""
    if "extends" not in data:
        return None
    parent = data.pop("extends")
    if parent is None or (isinstance(parent, str) and not parent.strip()):
        raise ConfigError(f"{path}: 'extends' is empty; name the recipe it builds on, or remove the key.")
    if isinstance(parent, list):
        raise ConfigError(f"{path}: 'extends' is a list, but a recipe extends exactly one recipe (chain "
                          "them: each file extends the one before).")
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: 'extends' must be a recipe name or a YAML path, not the "
                          f"{type(parent).__name__} {parent!r}.")
    return resolve_recipe(parent, path.parent, path)


def _layers(path: Path) -> Layers:
    """(source, mapping) from the root ancestor down to ``path``; ``extends`` is consumed."""
    layers: Layers = []
    seen: list[Path] = []
    current: Path | None = path
    while current is not None:
        current = current.resolve()
        if current in seen:
            raise ConfigError(f"{current} extends itself through a cycle of recipes.")
        if len(seen) == MAX_EXTENDS:
            raise ConfigError(f"{seen[0]} extends a chain of more than {MAX_EXTENDS} recipes.")
        seen.append(current)
        data = _read_yaml(current)
        parent = _parent(current, data)
        layers.insert(0, (str(current), absolute_layer(data, current.parent)))
        current = parent
    return layers


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
        value = load_yaml(raw) if raw.strip() else ""
    except RecipeYAMLError as err:
        raise ConfigError(f"--set {key}: its value is refused: {err.problem}.") from None
    except yaml.YAMLError:  # not YAML (``train.steps=*a``): the text itself, which validation judges
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


def _assign(tree: dict[str, Any], parts: list[str], value: Any) -> dict[str, Any]:
    """``tree`` with ``value`` at the dotted path ``parts``; a copy along the path, so no layer's
    mapping changes. A mapping merges into a mapping there, except ``knobs``, which it replaces."""
    head, out = parts[0], dict(tree)
    if len(parts) > 1:
        child = out.get(head)
        out[head] = _assign(child if isinstance(child, dict) else {}, parts[1:], value)
    elif isinstance(value, dict) and isinstance(out.get(head), dict) and head != "knobs":
        out[head] = _merge(out[head], value)
    else:
        out[head] = value
    return out


def merged_layers(
    recipe: str | Path | None, overrides: list[str] | tuple[str, ...], default_task: str
) -> tuple[Layers, dict[str, Any]]:
    """``(layers as (source, mapping), their merge)`` of a recipe and its ``--set`` overrides."""
    layers = _layers(resolve_recipe(recipe)) if recipe is not None else []
    merged: dict[str, Any] = {}
    for _, data in layers:
        merged = _merge(merged, _task_switch(merged, data, default_task))
    cwd = Path.cwd()
    parsed = [(key, absolute_layer(nested, cwd)) for key, nested in map(parse_override, overrides)]
    sets: dict[str, Any] = {}  # the overrides as one layer, for the task switch
    for key, nested in parsed:
        layers.append((f"--set {key}", nested))
        sets = _merge(sets, nested)
    task = sets.get("task")
    if isinstance(task, dict) and "name" in task:  # a switch starts from the new task's knobs
        merged = _merge(merged, _task_switch(merged, {"task": {"name": task["name"]}}, default_task))
    for key, nested in parsed:
        parts = key.split(".")
        merged = _assign(merged, parts, _leaf(nested, parts))
    return layers, merged


def _leaf(nested: dict[str, Any], parts: list[str]) -> Any:
    for part in parts:
        nested = nested[part]
    return nested
