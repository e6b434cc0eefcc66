"""Paths in a config are made absolute when it loads, each against the file that names it.

The rule: a relative path is read from the folder of the YAML file that names it (each
``extends`` layer from its own file's folder), and from the working folder when it comes from
``--set``; ``~`` is expanded. The layers are resolved one by one before they merge
(``scalerl.config.layers``), so ``RUN_DIR/config.yaml`` holds absolute paths and a
``--resume`` from any folder, a spawned generator or a Ray worker reads the same files.

Which values are paths is decided here only, in :data:`PATH_FIELDS`:

- ``model.base`` and ``forecast.prior_runs`` (a folder, a file or a glob) are paths;
- ``model.chat_template`` is one unless it is ``auto`` or ``none``;
- ``task.name``, ``task.reward_fn``, each entry of ``task.reward_fns`` and ``env.name`` are
  plug-in specs: the file of ``FILE.py:NAME`` is made absolute, while
  ``package.module:NAME`` and built-in names stay as they are (:func:`absolute_spec`, which
  also takes a list of specs);
- in ``task.knobs``, ``env.knobs`` and ``eval.downstream_knobs``, a knob named ``path`` or
  ending in ``_path``, ``_file`` or ``_dir`` is a path (:func:`absolute_knobs`); other knobs
  are passed as written.

A value of another type than the field expects is left as it is, for validation to judge.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEMPLATE_NAMES = ("auto", "none")
"""``model.chat_template`` values that name a rule, not a ``.jinja`` file."""

PATH_KNOB_SUFFIXES = ("_path", "_file", "_dir")
"""A knob named ``path`` or ending in one of these holds a path."""


def absolute_path(value: Any, base: str | Path) -> Any:
    """A relative path string as an absolute one under ``base`` (``~`` expanded, ``..`` folded,
    symbolic links kept); an absolute path, an empty string or a non-string is returned as is."""
    if not isinstance(value, str) or not value:
        return value
    return os.path.normpath(os.path.join(base, os.path.expanduser(value)))


def absolute_spec(value: Any, base: str | Path) -> Any:
    """A plug-in spec ``FILE.py:NAME`` with its file made absolute under ``base``; a
    ``package.module:NAME`` spec or a built-in name is returned as is, and a list of specs
    entry by entry (``task.reward_fns``)."""
    if isinstance(value, list):
        return [absolute_spec(entry, base) for entry in value]
    if not isinstance(value, str):
        return value
    head, sep, name = value.rpartition(":")
    if not (sep and head.endswith(".py")):
        return value
    return f"{absolute_path(head, base)}:{name}"


def is_path_knob(name: str) -> bool:
    """Whether a task or environment knob called ``name`` holds a path."""
    return name == "path" or name.endswith(PATH_KNOB_SUFFIXES)


def absolute_knobs(knobs: Any, base: str | Path) -> Any:
    """``knobs`` with every path knob (:func:`is_path_knob`) made absolute under ``base``."""
    if not isinstance(knobs, dict):
        return knobs
    return {k: absolute_path(v, base) if isinstance(k, str) and is_path_knob(k) else v for k, v in knobs.items()}


def _template(value: Any, base: str | Path) -> Any:
    return value if value in TEMPLATE_NAMES else absolute_path(value, base)


PATH_FIELDS: dict[str, Callable[[Any, str | Path], Any]] = {
    "model.base": absolute_path,
    "model.chat_template": _template,
    "task.name": absolute_spec,
    "task.reward_fn": absolute_spec,
    "task.reward_fns": absolute_spec,
    "task.knobs": absolute_knobs,
    "env.name": absolute_spec,
    "env.knobs": absolute_knobs,
    "eval.downstream_knobs": absolute_knobs,
    "forecast.prior_runs": absolute_path,
}
"""Every config field that holds a path, with how its value is made absolute."""


def absolute_layer(data: dict[str, Any], base: str | Path) -> dict[str, Any]:
    """A copy of one layer's mapping with each field of :data:`PATH_FIELDS` it sets made
    absolute under ``base`` (the layer's folder); the mapping itself is not changed."""
    out = data
    for dotted, convert in PATH_FIELDS.items():
        out = _replace(out, dotted.split("."), convert, base)
    return out


def _replace(tree: Any, parts: list[str], convert: Callable[[Any, str | Path], Any], base: str | Path) -> Any:
    """``tree`` with the value at ``parts`` converted, copied along the path; ``tree`` as it is
    when it holds no value there."""
    if not isinstance(tree, dict) or parts[0] not in tree:
        return tree
    head, value = parts[0], tree[parts[0]]
    new = convert(value, base) if len(parts) == 1 else _replace(value, parts[1:], convert, base)
    return tree if new is value else {**tree, head: new}
