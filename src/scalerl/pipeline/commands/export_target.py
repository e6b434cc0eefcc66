"""Where ``scalerl export --out`` may write: a new path, or an earlier export of the same run.

An export replaces its folder whole (``models.export.write_model_dir``), so whatever ``--out``
names is lost. It is therefore checked before anything is loaded or written, and refused
(one sentence, exit code 2, nothing touched) unless it is

- a path that does not exist yet (or an empty folder, which holds nothing to lose);
- an earlier export of this run: its ``scalerl-export.json`` names this run folder and lists
  every entry in it, so a user's file dropped in since is not deleted with it;
- ``RUN_DIR/model``, the folder the run itself rewrites at every checkpoint (the default).

Always refused: the run folder, a path inside it (its checkpoints, metrics) or above it; any
input the run's config names (``model.base``, data files, reward, task and environment files,
a ``.jinja`` template, ``forecast.prior_runs``), or a path inside or above one; a file; a
symbolic link; a folder holding anything else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from scalerl.config import Config, ConfigError

OWN_MODEL = "model"
_CHOOSE = "choose a path that does not exist yet (or an earlier export of this run)"


def check_target(out: Path, run_dir: Path, cfg: Config) -> None:
    """Refuse (``ConfigError``) an ``--out`` the export would destroy or hide; see module doc."""
    try:
        _check(out, run_dir, cfg)
    except (OSError, RuntimeError) as err:  # a path that cannot be looked up (EACCES, ELOOP, ENAMETOOLONG)
        text = getattr(err, "strerror", None) or str(err)
        raise ConfigError(f"--out {out} cannot be used for an export ({text}).") from None


def marker(run_dir: Path, step: int) -> dict[str, object]:
    """What an export records about itself (``write_model_dir``'s ``provenance``)."""
    return {"scalerl_export": 1, "run": str(run_dir.resolve()), "step": step}


def _check(out: Path, run_dir: Path, cfg: Config) -> None:
    if out.is_symlink():
        raise ConfigError(f"--out {out} is a symbolic link; name the folder itself, or {_CHOOSE}.")
    target, run = out.resolve(), run_dir.resolve()
    own = target == run / OWN_MODEL
    if not own:
        _refuse_overlap(out, target, run, f"the run folder ({run_dir})")
    for what, path in run_inputs(cfg):
        _refuse_overlap(out, target, path.resolve(), f"{what} ({path}) of this run")
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out} is a file, and an export writes a folder and never replaces a file; "
                          f"{_CHOOSE}.")
    if not own:
        _check_earlier_export(out, run)


def _refuse_overlap(out: Path, target: Path, other: Path, what: str) -> None:
    """``out`` must be neither ``other``, nor inside it, nor above it (both resolved)."""
    if target == other:
        relation = "is"
    elif other in target.parents:
        relation = "is inside"
    elif target in other.parents:
        relation = "contains"
    else:
        return
    raise ConfigError(f"--out {out} {relation} {what}, and an export replaces its folder whole; {_CHOOSE}.")


def _check_earlier_export(out: Path, run: Path) -> None:
    """An existing folder may be replaced only when it is empty or this run's own export,
    holding nothing but what that export wrote."""
    from scalerl.models.export import EXPORT_MARKER

    names = sorted(p.name for p in out.iterdir())
    if not names:
        return
    record = _read_marker(out / EXPORT_MARKER)
    if record is None:
        raise ConfigError(f"--out {out} is a folder holding {_some(names)}, not an export of this run, and an "
                          f"export replaces its folder whole; {_CHOOSE}.")
    if record.get("run") != str(run):
        raise ConfigError(f"--out {out} is an export of another run ({record.get('run')}), not of {run}; "
                          f"{_CHOOSE}.")
    extra = sorted(set(names) - set(record.get("files") or ()))
    if extra:
        raise ConfigError(f"--out {out} is an earlier export of this run but also holds {_some(extra)}, "
                          "which the export did not write; move them out first, or choose a new path.")


def _read_marker(path: Path) -> dict | None:
    """The marker's record, or None when there is none or it is not one of ours."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("scalerl_export") == 1 else None


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def run_inputs(cfg: Config) -> Iterator[tuple[str, Path]]:
    """Every file or folder the run reads, as ``(field, path)``: none of them may be replaced."""
    if cfg.model.base is not None:
        yield "model.base", Path(cfg.model.base).expanduser()
    if cfg.model.chat_template not in ("auto", "none"):
        yield "model.chat_template", Path(cfg.model.chat_template)
    rewards = "task.reward_fns" if cfg.task.reward_fns else "task.reward_fn"
    for what, spec in (("task.name", cfg.task.name), *((rewards, s) for s in cfg.task.reward_specs),
                       ("env.name", cfg.env.name)):
        head = (spec or "").rpartition(":")[0]
        if head.endswith(".py"):
            yield what, Path(head)
    for what, knobs in (("task.knobs", cfg.task.knobs), ("env.knobs", cfg.env.knobs),
                        ("eval.downstream_knobs", cfg.eval.downstream_knobs or {})):
        for key, value in knobs.items():
            path = Path(value).expanduser() if isinstance(value, str) and value.startswith(("/", "~")) else None
            if path is not None and path.exists():  # a data file; "/think" in a prompt knob is not one
                yield f"{what}.{key}", path
    prior = cfg.forecast.prior_runs
    if prior and not any(c in prior for c in "*?["):
        yield "forecast.prior_runs", Path(prior).expanduser()
