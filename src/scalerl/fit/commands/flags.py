"""The flags ``fit``, ``compare`` and ``plan`` share, and the guard that turns bad input into one
sentence.

Every flag defaults to None, so every default lives in ``FitOptions`` and ``ForecastOptions``;
:func:`options_from` and :func:`forecast_options` build them. :func:`guard` runs a command:
``CurveError`` (bad curves and options) and ``OSError`` (missing or unwritable files) become
one sentence on stderr and exit code 2, never a traceback, and each ``CurveWarning`` one line.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable

import numpy as np

from scalerl.fit.errors import EXIT_BAD_INPUT, CurveError, CurveWarning
from scalerl.fit.forecast import ForecastOptions
from scalerl.fit.forecast.options import forecast_defaults
from scalerl.fit.options import FitOptions
from scalerl.fit.readers import FORMATS, TRAIN_REWARD_COLUMNS, Columns
from scalerl.fit.readers.trainers import TRAINERS

__all__ = ["OPTION_FLAGS", "add_curve_options", "add_fit_flags", "add_train_reward_option", "check_fraction",
           "columns_of", "forecast_options", "guard", "options_from", "r0_value"]  # fmt: skip


def r0_value(text: str) -> float | str:
    if text in ("first", "fit"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, 'first' or 'fit', not {text!r}") from None


def add_fit_flags(p: argparse.ArgumentParser) -> None:
    """The columns and the fit's options: ``--x --y --step-to-compute --r0 --min-compute
    --method --level --margin``."""
    p.add_argument("--x", help="compute column (default: compute, gpu_hours, compute_gpu_hours, ...)")
    p.add_argument("--y", help="reward column (default: val_pass_rate, pass_rate, reward, ...)")
    p.add_argument("--step-to-compute", type=float, metavar="F",
                   help="compute per step: compute = step (or --x) times F")  # fmt: skip
    p.add_argument("--from", dest="trainer", choices=tuple(TRAINERS), default=None,
                   help="read another trainer's names for the validation, the training reward and the step "
                        "(default: detected from the log's columns)")  # fmt: skip
    p.add_argument("--r0", type=r0_value, default=None, metavar="VALUE|first|fit",
                   help="R0: a number, the first point's reward, or fitted (default: the step-0 reward if there is a "
                        "compute-0 point, else fitted)")  # fmt: skip
    p.add_argument("--min-compute", type=float, default=None, metavar="C",
                   help="fit only points with at least this compute (the paper drops ~1.5k GPU-h)")  # fmt: skip
    p.add_argument("--method", choices=("fast", "paper"), default=None,
                   help="fast continuous fit, or the paper's App. A.5 grid")  # fmt: skip
    p.add_argument("--level", type=float, default=None, metavar="P",
                   help=f"coverage every interval claims (default {FitOptions.level})")  # fmt: skip
    p.add_argument("--margin", type=float, default=None, metavar="M",
                   help="a ceiling is identified when A's interval is within ±M; two ceilings are equal within M "
                        f"(default {FitOptions.margin}, the paper's)")  # fmt: skip


def add_curve_options(p: argparse.ArgumentParser) -> None:
    """RUN... and the fit flags, as ``fit`` and ``compare`` take them."""
    p.add_argument("runs", nargs="+", metavar="RUN", help=f"{FORMATS}; globs ok")
    add_fit_flags(p)
    p.add_argument("--no-budget", action="store_true",
                   help="skip the budget advice (compute needed to pin A; ~1 s per run)")  # fmt: skip


def add_train_reward_option(p: argparse.ArgumentParser) -> None:
    """``--train-reward``, shared by ``fit`` and ``plan`` (``fit.forecast.companion``)."""
    p.add_argument("--train-reward", metavar="COLUMN|none", default=None,
                   help="the training reward the forecast follows where the log has one (default: the first of "
                        f"{', '.join(TRAIN_REWARD_COLUMNS)} present; none: the validation curve alone)")  # fmt: skip


def guard(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run ``handler``; bad input becomes one sentence on stderr and exit code 2, and each
    ``CurveWarning`` one line on stderr."""

    def run(args: argparse.Namespace) -> int:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", CurveWarning)
                shown = warnings.showwarning

                def show(message, category, *rest, **kwargs):
                    if not issubclass(category, CurveWarning):
                        return shown(message, category, *rest, **kwargs)
                    print(f"scalerl {args.command}: warning: {message}", file=sys.stderr)

                warnings.showwarning = show
                return handler(args)
        except CurveError as err:
            message = str(err)
        except OSError as err:
            name = err.filename if err.filename is not None else ""
            message = f"{name}: {err.strerror or err}." if name else f"{err}."
        print(f"scalerl {args.command}: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    return run


def columns_of(args: argparse.Namespace) -> Columns:
    return Columns(x=args.x, y=args.y, step_to_compute=getattr(args, "step_to_compute", None),
                   trainer=getattr(args, "trainer", None))


OPTION_FLAGS = {"r0": "--r0", "min_compute": "--min-compute", "method": "--method", "level": "--level",
                "margin": "--margin"}  # fmt: skip


def options_from(args: argparse.Namespace, defaults: dict | None = None) -> FitOptions:
    """The fit options the flags name; a flag not given keeps ``defaults`` (a forecast's:
    ``forecast.options.forecast_defaults``, a run folder's own ``forecast.*`` among them). Every
    bad number (a level, margin, R0, cut or target outside its range, NaN included) is one
    sentence here, before any file is read or any line printed."""
    max_compute = getattr(args, "max_compute", None)
    if max_compute is not None and not (np.isfinite(max_compute) and max_compute > 0):
        raise CurveError(f"--max-compute must be a positive compute, got {max_compute:g}.")
    given = {k: getattr(args, k, None) for k in OPTION_FLAGS}
    defaults = forecast_defaults() if defaults is None else defaults
    options = FitOptions.from_given({**defaults, **{k: v for k, v in given.items() if v is not None}},
                                    OPTION_FLAGS)  # fmt: skip
    for c in getattr(args, "target_compute", ()):
        if not np.isfinite(c) or c <= 0:
            raise CurveError(f"--target-compute must be a positive compute, got {c:g}.")
    for r in getattr(args, "target_reward", ()):
        if not np.isfinite(r) or not 0.0 <= r <= 1.0:
            raise CurveError(f"--target-reward must be a pass rate in [0, 1], got {r:g}.")
    return options


def forecast_options(args: argparse.Namespace, fit: FitOptions, *, budget: float | None = None, prior=None,
                     window: int | None = None) -> ForecastOptions:
    """The forecast the flags ask for: ``fit``'s options, the budget, ``--train-reward``, the prior
    and the read window (``ForecastOptions``' own defaults where not given)."""
    changes = {"fit": fit, "budget": budget, "train_reward": getattr(args, "train_reward", None), "prior": prior}
    if window is not None:
        changes["window"] = window
    return ForecastOptions(**changes)


def check_fraction(value: float | None, name: str, *, allow_one: bool) -> None:
    if value is None:
        return
    ok = 0.0 < value <= 1.0 if allow_one else 0.0 < value < 1.0
    if not ok:
        upper = "1]" if allow_one else "1)"
        raise CurveError(f"{name} must lie in (0, {upper}, got {value:g}.")
