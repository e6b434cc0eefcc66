"""Is the ``trl-grpo`` recipe TRL's ``GRPOTrainer``? Its curves beside TRL's, seed by seed.

    PYTHONPATH=src .venv/bin/python bench/trl_port.py [--markdown]

Reads two corpus families (``bench/corpus/make.py``), made on this machine from the same
SFT-warmed nano model, task (addition, 1-3 digits), workload (P 2 x G 8, 32 new tokens),
learning rates and seeds, validated alike (512 held-out prompts every 40 steps, one sample
each at temperature 1, 32 tokens, no FP32 head):

* ``trl-defaults-addition``: TRL's ``GRPOTrainer`` with its default loss (``loss_type="dapo"``,
  clip 0.2, token aggregation, ``scale_rewards="group"``, ``beta=0``, one iteration), a
  constant learning rate;
* ``scalerl-trl-grpo-addition``: ``scalerl train --recipe trl-grpo`` on the same.

For each learning rate and validation step: each trainer's mean over its seeds and the seeds'
range, then whether the two means agree: their difference within the larger of the two seed
ranges, or within two standard errors of the evaluations' own sampling (``sqrt(p (1 - p) /
512)`` per evaluation, over the seeds of each side: at step 0 every run evaluates the same
model, and TRL's evaluation seed is the same in every run, so its range there is 0). The
training reward (the mean of the steps since the evaluation before, 640 samples) is compared
the same way at the last evaluation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forecast_real import _print  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
SAMPLES = {"val_pass_rate": 512, "train_reward": 40 * 16}  # samples behind one value


def verdict(a: np.ndarray, b: np.ndarray, key: str) -> tuple[float, str]:
    """|mean(a) - mean(b)| and whether it is within the seeds' spread or 2 SE of sampling."""
    gap = abs(a.mean() - b.mean())
    p = float(np.clip((a.mean() + b.mean()) / 2, 0.01, 0.99))
    se = np.sqrt(p * (1 - p) / SAMPLES[key] * (1 / a.size + 1 / b.size))
    return gap, "agree" if gap <= max(np.ptp(a), np.ptp(b), 2 * se) else "APART"
TRL, OURS = "trl-defaults-addition", "scalerl-trl-grpo-addition"


def _family(name: str) -> dict[float, list[list[dict]]]:
    """lr -> one list of evaluation rows per seed."""
    index = json.loads((CORPUS / "index.json").read_text())
    out: dict[float, list[list[dict]]] = {}
    for key, meta in sorted(index.items()):
        if meta["family"] == name:
            rows = [json.loads(x) for x in (CORPUS / f"{key}.jsonl").read_text().splitlines() if x.strip()]
            out.setdefault(float(meta["lr"]), []).append(rows)
    return out


def _at(runs: list[list[dict]], step: int, key: str) -> np.ndarray:
    return np.array([next(r[key] for r in rows if r["step"] == step) for rows in runs], dtype=float)


def table(trl: dict, ours: dict) -> list[tuple]:
    out = []
    for lr in sorted(set(trl) & set(ours)):
        steps = sorted({r["step"] for rows in trl[lr] + ours[lr] for r in rows}
                       & set.intersection(*({r["step"] for r in rows} for rows in trl[lr] + ours[lr])))  # fmt: skip
        shown = [s for s in steps if s % 200 == 0] or steps
        for s in shown:
            a, b = _at(trl[lr], s, "val_pass_rate"), _at(ours[lr], s, "val_pass_rate")
            gap, said = verdict(a, b, "val_pass_rate")
            out.append((f"{lr:g}", s, f"{a.mean():.3f} [{a.min():.3f}, {a.max():.3f}]",
                        f"{b.mean():.3f} [{b.min():.3f}, {b.max():.3f}]", f"{gap:.3f}", said))  # fmt: skip
        last = steps[-1]
        a, b = _at(trl[lr], last, "train_reward"), _at(ours[lr], last, "train_reward")
        gap, said = verdict(a, b, "train_reward")
        out.append((f"{lr:g}", f"{last} (training reward)", f"{a.mean():.3f} [{a.min():.3f}, {a.max():.3f}]",
                    f"{b.mean():.3f} [{b.min():.3f}, {b.max():.3f}]", f"{gap:.3f}", said))  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    trl, ours = _family(TRL), _family(OURS)
    seeds = {lr: (len(trl.get(lr, [])), len(ours.get(lr, []))) for lr in sorted(set(trl) | set(ours))}
    print("seeds per learning rate (TRL, scalerl): " + ", ".join(f"{lr:g}: {a}, {b}" for lr, (a, b) in seeds.items()))
    _print("Validation pass rate: mean over seeds [min, max]",
           ("lr", "step", "TRL GRPOTrainer", "scalerl trl-grpo", "|difference|", "seeds' spread or 2 SE"), table(trl, ours),
           args.markdown)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
