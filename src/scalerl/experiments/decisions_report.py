"""An adaptive study's decisions in its reports: what was stopped, when and why, and each
point's curve with its forecast at the budget from the moment it was stopped.

Read from ``OUT/decisions.json`` (``scalerl.experiments.adaptive``) beside the runs' own
``metrics.jsonl``; a folder without it gets nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalerl.fit import report
from scalerl.runfolder import DECISIONS, METRICS, run_folders


def _winner(d: dict) -> str:
    from scalerl.fit.choose import winner_text

    return winner_text(d)


def _measured(threshold) -> str:
    """What this threshold's stops cost on real runs, where it is the measured default."""
    from scalerl.fit.choose import MEASURED, THRESHOLD

    return f" Its threshold, the default, was {MEASURED}." if threshold == THRESHOLD else (
        f" Its threshold is not the default {THRESHOLD:g}, whose stops were {MEASURED}.")


def decisions_section(out: Path, x: str | None = None) -> tuple[str, tuple[report.Table, ...], report.Figure] | None:
    """(a paragraph, the tables of stopped points and of every rung's lines, the figure), or
    None without decisions. A study still running says its rung, never a winner."""
    path = Path(out) / DECISIONS
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text())
        stopped = list(d["stopped"])
        budget = float(d["budget"])
    except (OSError, ValueError, TypeError, KeyError):
        return None  # a torn or foreign file: the rest of the report stands
    used = d.get("fraction_used")
    text = (f"Adaptive study: judged at {budget:.4g} compute per point, stopping a point once P(best at the "
            f"budget) < {d.get('threshold')} (draws paired: {d.get('pairing', 'independent')}). Winner: {_winner(d)}. {len(stopped)} point(s) stopped early; the study "
            f"used {d.get('compute_used', 0):.4g} of {d.get('compute_full', 0):.4g} compute"
            + (f" ({100 * used:.0f}%)." if used is not None else ".") + _measured(d.get("threshold")))  # fmt: skip
    rows = tuple((s["point"], f"{s['at_compute']:.4g}",
                  f"{s['forecast']['median']:.3f} [{s['forecast']['lo']:.3f}, {s['forecast']['hi']:.3f}]",
                  f"{s['p_best']:.3f}", s["reason"]) for s in stopped)  # fmt: skip
    table = report.Table("Points stopped early, each with its forecast at the budget when it was stopped",
                         ("point", "stopped at compute", "forecast at the budget", "P(best)", "reason"), rows)
    lines = tuple((line.split(": ", 1)[0], line.split(": ", 1)[1]) for r in d.get("rounds", [])
                  for line in r.get("lines", []) if ": " in line)  # fmt: skip
    rungs = report.Table("Every rung's decision for every point (stopped, kept or undecided, and why)",
                         ("rung", "decision"), lines)
    if not d.get("done", True):
        u = d.get("under_way") or {}
        text = (f"Adaptive study in progress: rung {u.get('rung', '?')} of {u.get('of', '?')} under way "
                f"(to compute {u.get('at_compute', float('nan')):.4g}; {len(u.get('running', []))} point(s) "
                f"training); no winner until it ends. " + text.split(" Winner: ")[0] + ".")  # fmt: skip
    return text, (table, rungs), _figure(out, d, x)


def _figure(out: Path, d: dict, x: str | None) -> report.Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from scalerl.fit import plot
    from scalerl.fit.errors import CurveError
    from scalerl.fit.readers import read_jsonl

    fig = Figure(figsize=(9, 4.5))  # never pyplot: no global figure registry to leak into
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    budget = float(d["budget"])
    stops = {s["point"]: s for s in d["stopped"]}
    for i, folder in enumerate(run_folders(out)):
        metrics, name = folder / METRICS, folder.relative_to(out).as_posix()
        try:
            (curve,) = read_jsonl(metrics, x=x)
        except (CurveError, ValueError):
            continue
        color = f"C{i % 10}"
        ax.plot(curve.compute, curve.reward, "-", color=color, lw=1.2, label=name)
        if name in stops:
            s, f = stops[name], stops[name]["forecast"]
            ax.axvline(s["at_compute"], color=color, ls=":", lw=0.8)
            ax.errorbar([budget], [f["median"]], yerr=[[f["median"] - f["lo"]], [f["hi"] - f["median"]]],
                        fmt="x", color=color, capsize=4)  # fmt: skip
    ax.axvline(budget, color="k", lw=0.8)
    ax.set_xlabel(x or "compute_gpu_hours")
    ax.set_ylabel("validation")
    ax.set_title("curves; a stopped point: its stop (dotted) and its forecast at the budget (x, interval)")
    ax.legend(fontsize=7)
    return report.Figure("the study's decisions", plot.png_bytes(fig), "decisions.png")
