"""The runs list as an overview: every listed run's validation curve with its forecast band,
the config values that differ between the runs, and the runs grouped by seed.

- **Differing values.** Each run's ``config.yaml`` flattened to dotted keys
  (``optim.lr``); the keys whose values are not all equal are the list's extra columns, at
  most ``MAX_COLUMNS``: the most varied first (the most distinct values; among equals, the
  sections users vary most, ``SECTIONS``, before the rest), seed keys last; how many more
  there are is said (``more``).
- **Seed groups.** Runs whose recipe and differing values agree except for a seed key
  (``SEED_KEYS``) are one group, named by the recipe and the shown columns' values (and how
  many more differ, with a short digest of them, so that a 20,000-key config never makes a
  249 KB name). A group of two or more is drawn as its mean and its min-max band on a shared
  compute grid (``GRID`` points over the range its members cover, each linearly interpolated
  there), as W&B groups runs; a member that shares no compute range with the others is left
  out of the band and named (``left_out``), never the whole group.
- **Bands.** Each run's forecast band is read from its one ``Forecast`` (``Served.forecast``:
  never made here, only read from what the server keeps, so a page never waits for a fit).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from scalerl.serve.runs import Found, Served

__all__ = ["MAX_CURVES", "differing", "overview"]

MAX_CURVES = 60  # runs an overview draws (the first, in the list's order); more are said
MAX_COLUMNS = 8
SECTIONS = ("optim", "loss", "train", "pipeline", "advantages", "filters", "curriculum", "length", "sampling",
            "task", "model", "rollout", "env", "learner", "eval", "forecast", "log")
"""Config sections in the order users vary them (a tie of distinct values shows ``optim.lr``
before ``eval.every``); a key of none of them comes last."""
SEED_KEYS = ("train.seed", "seed")
GRID = 60
CURVE_POINTS = 300  # each curve thinned to at most this many points (every k-th, the last kept)
BAND_POINTS = 24


def flat(cfg: dict, prefix: str = "") -> dict[str, str]:
    """``cfg`` as ``{"a.b": "value"}``, each value as compact JSON text."""
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out |= flat(v, key + ".")
        else:
            out[key] = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return out


def differing(configs: dict[str, dict], most: int | None = MAX_COLUMNS) -> list[str]:
    """The keys whose values differ between the runs, in the module docstring's order, at most
    ``most``; a run whose config is not (yet) read takes no part."""
    flats = [flat(c) for c in configs.values() if c]
    if len(flats) < 2:
        return []
    keys = {k for f in flats for k in f}
    distinct = {k: len({f.get(k) for f in flats}) for k in keys if k != "name"}
    diff = [k for k, n in distinct.items() if n > 1]
    rank = {s: i for i, s in enumerate(SECTIONS)}
    diff.sort(key=lambda k: (k in SEED_KEYS, -distinct[k], rank.get(k.split(".")[0], len(rank)), k))
    return diff if most is None else diff[:most]


def group_of(recipe: str, values: dict[str, str], shown: Sequence[str] = ()) -> str:
    """The seed group's name: the recipe and every differing value but the seed's, those of
    ``shown`` (the list's columns) by name, the rest as their count and a digest."""
    import hashlib

    rest = {k: v for k, v in values.items() if k not in SEED_KEYS}
    named = [f"{k}={v}" for k, v in rest.items() if not shown or k in shown]
    hidden = sorted(f"{k}={v}" for k, v in rest.items() if shown and k not in shown)
    if hidden:
        digest = hashlib.sha1("\n".join(hidden).encode("utf-8", "surrogateescape")).hexdigest()[:8]
        named.append(f"+{len(hidden):,} more #{digest}")
    return recipe + (f" ({', '.join(named)})" if named else "")


def overview(served: Served, runs: Sequence[Found]) -> dict:
    """Every run's curve and band, its differing values and group, and each group's mean and
    band (module docstring)."""
    views = {f.id: served.view(f, wait=0.0) for f in runs}
    columns = differing({i: v.config for i, v in views.items()})
    every = differing({i: v.config for i, v in views.items()}, most=None)  # a group is equal in all but seeds
    out, truncated = [], max(len(runs) - MAX_CURVES, 0)
    for f in runs[:MAX_CURVES]:
        view = views[f.id]
        flat_cfg = flat(view.config)
        values = {k: flat_cfg.get(k) for k in columns}
        recipe = str(view.config.get("name", ""))
        group = group_of(recipe, {k: flat_cfg.get(k) for k in every}, columns) if view.config else f.id
        row = {"id": f.id, "recipe": recipe, "state": view.state.state, "values": values, "metric": served.metric(view.config),
               "group": group, "compute": [], "value": [], "band": None}  # fmt: skip
        if view.log is not None:
            c, y = view.log.curve.compute, view.log.curve.reward
            keep = _thin(c.size, CURVE_POINTS)
            row |= {"compute": c[keep].tolist(), "value": y[keep].tolist(), "band": _band(served, f, view)}
        out.append(row)
    units = sorted({served.unit(f) for f in runs[:MAX_CURVES]})
    unit = units[0] if len(units) == 1 else "mixed: " + ", ".join(units) if units else "device-hours"
    return {"runs": out, "columns": columns, "more_columns": len(every) - len(columns), "groups": groups(out),
            "truncated": truncated, "unit": unit}


def groups(rows: list[dict]) -> list[dict]:
    """Each group of two or more runs with curves: its mean and min-max band on a shared grid."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        if len(r["compute"]) >= 2:
            by.setdefault(r["group"], []).append(r)
    out = []
    for name, members in by.items():
        if len(members) < 2:
            continue
        kept, left = _overlapping(members)
        if len(kept) < 2:
            continue
        lo_c = max(m["compute"][0] for m in kept)
        hi_c = min(m["compute"][-1] for m in kept)
        grid = np.linspace(lo_c, hi_c, GRID)
        ys = np.stack([np.interp(grid, m["compute"], m["value"]) for m in kept])  # (runs, GRID)
        out.append({"name": name, "runs": [m["id"] for m in kept], "compute": grid.tolist(),
                    "mean": ys.mean(axis=0).tolist(), "lo": ys.min(axis=0).tolist(), "hi": ys.max(axis=0).tolist(),
                    "left_out": [{"id": m["id"], "why": "it shares no compute range with the others"}
                                 for m in left]})  # fmt: skip
    return out


def _overlapping(members: list[dict]) -> tuple[list[dict], list[dict]]:
    """The members whose compute ranges share a stretch, and the others: while they share none,
    the member farthest from the group's median range (the medians of its members' starts and
    ends) is left out."""
    kept, left = list(members), []
    while len(kept) >= 2 and not min(m["compute"][-1] for m in kept) > max(m["compute"][0] for m in kept):
        lo = float(np.median([m["compute"][0] for m in kept]))
        hi = float(np.median([m["compute"][-1] for m in kept]))
        worst = max(kept, key=lambda m: max(m["compute"][0] - hi, lo - m["compute"][-1], 0.0))
        kept.remove(worst)
        left.append(worst)
    return kept, left


def _band(served: Served, found: Found, view) -> dict | None:
    drawn = served.forecast(found, view).forecast
    if drawn is None or drawn.band is None:
        return None
    keep = _thin(drawn.grid.size, BAND_POINTS)
    a = drawn.band
    return {"compute": drawn.grid[keep].tolist(), "median": np.asarray(a.value)[keep].tolist(),
            "lo": np.asarray(a.lo)[keep].tolist(), "hi": np.asarray(a.hi)[keep].tolist(),
            "state": drawn.forecast.state.name}  # fmt: skip


def _thin(n: int, most: int) -> np.ndarray:
    if n <= most:
        return np.arange(n)
    idx = np.arange(0, n, int(np.ceil(n / most)))
    return np.unique(np.append(idx, n - 1))


def config_values(served: Served, runs: Sequence[Found]) -> tuple[list[str], dict[str, dict[str, str]], int]:
    """The differing keys, each run's values of them (the runs list's extra columns), and how
    many more keys differ than are shown."""
    configs = {f.id: served.view(f, wait=0.0).config for f in runs}
    every = differing(configs, most=None)
    columns = every[:MAX_COLUMNS]
    return columns, {i: {k: flat(c).get(k) for k in columns} for i, c in configs.items()}, len(every) - len(columns)

