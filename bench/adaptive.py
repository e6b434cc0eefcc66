"""Does an adaptive study keep the winner, and at what compute? The replay benchmark of issue 38.

    PYTHONPATH=src .venv/bin/python bench/adaptive.py [--seeds 20] [--markdown]

Two replays of ``scalerl.fit.choose`` (the policy of ``scalerl sweep --adaptive``: rungs from
budget / 8 doubling to the budget, stop a point once P(best at the budget) < 0.05):

* **Table 1.** Five of the paper's fits (ScaleRL, -32k, -bs512, -bs2048, -8gen; App. A.13) drawn
  as runs of 48 evaluations to 100k GPU-hours, with evaluation noise of sd 0.01 (the paper's
  1,000 prompts x 16 samples) for ``--seeds`` noise draws. Early values point the wrong way:
  at 12.5k GPU-hours bs512 and ScaleRL lead, and at 100k the 32k and bs2048 runs are ahead
  (0.635 and 0.630 against 0.610). "Kept" means the study's winner (one point or a tie) holds
  the true best at the budget, or a point within 0.01 of it (the noise).
* **The corpus** (``bench/corpus/``, issue 36's real runs): each family with several seeds or
  learning rates is one study, every run a point, at the budget of its shortest run. "Kept"
  means the study's winner and the full runs' winner (both read from the same forecasts at
  the budget, with every run's data to the budget) share a point.

Fractions of compute are of the same study run to the end. "Floor" is the least any policy
that keeps a tie whole can use: the k tied winners run to the budget and the other n - k
stop at the first rung, (k + (n - k) / 8) / n. The machine's parallel scaling is printed
(single-threaded numpy: a second core changes nothing).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from forecast_real import _print, _scaling  # noqa: E402

from scalerl.fit import law  # noqa: E402
from scalerl.fit.choose import replay  # noqa: E402
from scalerl.fit.forecast import ForecastOptions, RunLog, read_logs  # noqa: E402
from scalerl.fit.paper import TABLE1  # noqa: E402
from scalerl.fit.readers import Columns  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
STUDY = ("ScaleRL", "ScaleRL-32k", "ScaleRL-bs512", "ScaleRL-bs2048", "ScaleRL-8gen")
BUDGET, EVALS, SD, NOISE_WITHIN = 1e5, 48, 0.01, 0.01


def _winners(w) -> list[str]:
    return [w] if isinstance(w, str) else list(w)


def _floor(d: dict, n: int) -> float:
    k = len(_winners(d["winner"]))
    return (k + (n - k) / 8) / n


def table1(seeds: int) -> list[tuple]:
    fits = {p.name: p for p in TABLE1}
    truth = {n: float(law.sigmoid(BUDGET, fits[n].A, fits[n].B, fits[n].C_mid, 0.0)) for n in STUDY}
    best = max(truth.values())
    c = np.linspace(BUDGET / EVALS, BUDGET, EVALS)
    rows, kept, used, early_wrong = [], 0, [], 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        curves = [RunLog.of(c, np.clip(law.sigmoid(c, fits[n].A, fits[n].B, fits[n].C_mid, 0.0)
                                       + rng.normal(0, SD, EVALS), 0, 1), name=n) for n in STUDY]  # fmt: skip
        early = max(curves, key=lambda k: k.curve.head(BUDGET / 8).reward[-3:].mean()).name
        early_wrong += truth[early] < best - NOISE_WITHIN
        d = replay(curves, BUDGET).to_dict()
        ok = any(truth[w] >= best - NOISE_WITHIN for w in _winners(d["winner"]))
        kept += ok
        used.append(d["fraction_used"])
        rows.append((seed, early, ", ".join(_winners(d["winner"])), "yes" if ok else "NO",
                     f"{100 * d['fraction_used']:.0f}%", f"{100 * _floor(d, len(STUDY)):.0f}%", len(d["stopped"])))  # fmt: skip
    rows.append(("all", f"early leader not the best: {early_wrong}/{seeds}", "", f"{kept}/{seeds}",
                 f"{100 * float(np.median(used)):.0f}% (median)", "", ""))  # fmt: skip
    return rows


def corpus() -> list[tuple]:
    """Each family one study, replayed twice side by side: on the validation alone, and with
    each run's training reward (``fit.companion``, the forecast's default where a log has it)."""
    rows, used = [], {False: [], True: []}
    for fam in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        paths = sorted(fam.glob("*.jsonl"))
        if len(paths) < 2:
            continue
        curves = read_logs(paths, Columns(x="compute_gpu_hours", y="val_pass_rate"))
        budget = min(float(k.curve.compute[-1]) for k in curves)
        row = [fam.name, len(curves), f"{budget:.3g}"]
        for follow in (False, True):
            options = ForecastOptions() if follow else ForecastOptions(train_reward="none")
            d = replay(curves, budget, options=options).to_dict()
            full = _winners(d["full"]["winner"])
            ok = bool(set(_winners(d["winner"])) & set(full))
            used[follow].append(d["fraction_used"])
            row += [", ".join(_winners(d["winner"])), "yes" if ok else "NO", f"{100 * d['fraction_used']:.0f}%",
                    f"{100 * _floor(d, len(curves)):.0f}%"]  # fmt: skip
        rows.append(tuple(row))
    rows.append(("all", "", "", "", "", f"{100 * float(np.median(used[False])):.0f}% (median)", "", "", "",
                 f"{100 * float(np.median(used[True])):.0f}% (median)", ""))  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="noise draws of the Table 1 study")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    print(_scaling())
    t = time.perf_counter()
    _print(f"Table 1 study ({', '.join(STUDY)}), budget {BUDGET:g} GPU-hours, noise sd {SD}",
           ("seed", "leader at 12.5k", "winner kept", "true best within 0.01", "compute used", "floor", "stopped"),
           table1(args.seeds), args.markdown)  # fmt: skip
    _print("The corpus: each family one study, every run a point",
           ("family", "runs", "budget", "winner (validation)", "kept", "compute used", "floor",
            "winner (training reward)", "kept", "compute used", "floor"),
           corpus(), args.markdown)  # fmt: skip
    print(f"\n{time.perf_counter() - t:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
