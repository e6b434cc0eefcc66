"""A config validation error as one sentence that names the layer to blame.

The merged mapping pydantic validates has lost where each value came from; the layers
(``scalerl.config.layers``: recipe files, then one layer per ``--set``) still know. A field's
error is blamed on the last layer that set the field. A section's check (a ``model_validator``
of ``task`` or ``rollout.vllm``) is blamed on the last layer that set anything in that section.

A whole-config check has no field of its own, and blaming the last layer, as this once did,
named an unrelated ``--set`` ("invalid config in --set eval.num_prompts" for knobs that came
from the recipe file). So its message is searched for the config fields it names
(``eval.downstream_knobs``, ``length.interrupt_range``), and each is blamed on the layer that set
it; when no layer set any of them, the sentence names the whole stack ("the recipe R with the
overrides ..."), never one layer that had nothing to do with it.

An unknown key that is one of TRL's ``GRPOConfig`` names says what it is here
(``scalerl.config.trl_names``); any other unknown key says which known key it probably meant
(:func:`did_you_mean`).
"""

from __future__ import annotations

import difflib
import re
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from scalerl.config.trl_names import trl_hint

Layers = list[tuple[str, dict[str, Any]]]

_DOTTED = re.compile(r"\b[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+")


def has_path(data: Any, loc: tuple[str, ...]) -> bool:
    """Whether the nested mapping ``data`` holds a value at ``loc``."""
    for part in loc:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def _setter(layers: Layers, loc: tuple[str, ...]) -> str | None:
    return next((src for src, data in reversed(layers) if has_path(data, loc)), None)


def _field(model: type[BaseModel] | None, dotted: str) -> tuple[str, ...] | None:
    """``dotted`` cut after its first part that is no section (``task.knobs.path`` ->
    ``("task", "knobs")``), or None when it does not start with a field of ``model``."""
    loc: list[str] = []
    for part in dotted.split("."):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            break
        loc.append(part)
        sub = field.annotation
        plain_class = isinstance(sub, type) and get_origin(sub) is None  # not tuple[int, int]
        model = sub if plain_class and issubclass(sub, BaseModel) else None
    return tuple(loc) if len(loc) > 1 else None


def _section(sub: Any) -> type[BaseModel] | None:
    """The config section an annotation holds (``LoraConfig | None`` -> ``LoraConfig``), if any."""
    for kind in (sub, *get_args(sub)):
        if isinstance(kind, type) and get_origin(kind) is None and issubclass(kind, BaseModel):
            return kind
    return None


def did_you_mean(model: type[BaseModel], loc: tuple[str, ...]) -> str | None:
    """The dotted key the unknown key ``loc`` was probably meant to be, or None.

    First the closest name in its own section (``difflib.get_close_matches``: the section
    names at the top); else the same name in another section (``train.lr`` -> ``optim.lr``)."""
    section: type[BaseModel] | None = model
    for part in loc[:-1]:
        field = section.model_fields.get(part) if section is not None else None
        section = _section(field.annotation) if field is not None else None
    if section is None:
        return None
    close = difflib.get_close_matches(loc[-1], list(section.model_fields), n=1)
    if close:
        return ".".join((*loc[:-1], close[0]))
    for name, field in model.model_fields.items():  # another section of the whole config
        other = _section(field.annotation)
        if other is not None and other is not section and loc[-1] in other.model_fields:
            return f"{name}.{loc[-1]}"
    return None


def _stack(layers: Layers) -> str:
    """The whole stack of layers in words, for an error no single layer is to blame for."""
    recipes = [src for src, _ in layers if not src.startswith("--set ")]
    sets = [src for src, _ in layers if src.startswith("--set ")]
    if not layers:
        return "the default config"
    if not sets:
        return f"the recipe {recipes[-1]}"
    if not recipes:
        return f"the defaults with the overrides {', '.join(sets)}"
    return f"the recipe {recipes[-1]} with the overrides {', '.join(sets)}"


def _blame_whole(msg: str, layers: Layers, model: type[BaseModel]) -> str:
    """``SOURCE (field, ...) and SOURCE (...)`` for the fields ``msg`` names that a layer set."""
    by_source: dict[str, list[str]] = {}
    for dotted in dict.fromkeys(_DOTTED.findall(msg)):
        loc = _field(model, dotted)
        source = _setter(layers, loc) if loc is not None else None
        if source is not None and ".".join(loc) not in by_source.get(source, []):
            by_source.setdefault(source, []).append(".".join(loc))
    if not by_source:
        return _stack(layers)
    parts = [src if src in {f"--set {f}" for f in fields} and len(fields) == 1 else f"{src} ({', '.join(fields)})"
             for src, fields in by_source.items()]
    return " and ".join(parts)


def explain(err: ValidationError, layers: Layers, model: type[BaseModel]) -> str:
    """The first error of ``err`` as one sentence naming its key and the layer(s) to blame."""
    first = err.errors()[0]
    loc = tuple(str(p) for p in first["loc"] if not isinstance(p, int))
    if first["type"] != "extra_forbidden":  # a bad value: its key without a union member's tag ("constrained-int")
        loc = _field(model, ".".join(loc)) or loc
    key = ".".join(loc) or "<root>"
    msg = first["msg"].removeprefix("Value error, ")
    if not loc:
        return f"invalid config in {_blame_whole(msg, layers, model)}: {msg}."
    source = _setter(layers, loc)
    if source is None:  # a missing/derived key: blame the most specific layer
        source = layers[-1][0] if layers else "<defaults>"
    if first["type"] == "extra_forbidden":
        trl = trl_hint(loc, layers)  # TRL's names first: the closest name is wrong for them
        if trl is not None:
            return f"unknown config key {key!r} in {source}: {trl}."
        guess = did_you_mean(model, loc)
        return f"unknown config key {key!r} in {source}" + (f"; did you mean {guess!r}?" if guess else ".")
    if isinstance(first.get("input"), dict):  # a whole section's check
        return f"invalid {key!r} in {source}: {msg}."
    return f"bad value {first.get('input')!r} for {key!r} in {source}: {msg[0].lower()}{msg[1:]}."
