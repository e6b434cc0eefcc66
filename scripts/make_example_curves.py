"""Generate the SYNTHETIC example curves bundled in ``src/scalerl/examples/``.

Nothing here is real training data. Each curve is the ScaleRL sigmoid (paper §1, Eq. 1)
``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)`` with parameters from the paper's Table 1
(§3.4), sampled the way a validation run is measured (§1.2): every evaluation scores
1,000 held-out prompts with 16 generations each (mean@16). The noise is binomial-like:

- each prompt's pass probability is drawn from ``Beta(kappa * R, kappa * (1 - R))`` around
  the curve value ``R`` (prompts differ in difficulty, and checkpoint to checkpoint);
- each prompt's 16 generations pass with ``Binomial(16, p_i)``;
- the evaluation's value is the mean over the 16,000 generations.

Compute is in GPU-hours (§1.7) at ``GPU_HOURS_PER_STEP`` per step, with an evaluation every
``EVAL_EVERY_STEPS`` steps (the paper evaluates every 100 steps), from step 0 (R0).

Files (all prefixed ``synthetic_``):

- ``synthetic_scalerl_seed{0,1,2}.csv``: ScaleRL (Table 1 row "ScaleRL"), three noise seeds,
  the full 16k GPU-hour budget of the leave-one-out runs (§3.3).
- ``synthetic_scalerl_seed0_half.jsonl``: seed 0 up to 8k GPU-hours (the half budget that
  the paper fits on), in the JSON-lines layout ``scalerl train`` writes, including
  training-step records without validation fields.
- ``synthetic_loo-*.csv``: "leave-one-out-like" variants built from ScaleRL's parameters
  with a different B / C_mid and A within the ±0.02 margin. Only loo-dapo's B = 1.77 is a
  number from the paper's text; the other values are ILLUSTRATIVE, not the paper's.
- ``synthetic_scalerl-32k.csv``: Table 1 row "ScaleRL-32k" (a higher A, a slower start),
  to 40k GPU-hours.

Run: ``python scripts/make_example_curves.py`` (deterministic; rewrites the files).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from scalerl.fit.law import sigmoid

OUT = Path(__file__).resolve().parents[1] / "src" / "scalerl" / "examples"

R0 = 0.30  # a post-SFT starting pass rate
GPU_HOURS_PER_STEP = 1.5  # ~1.5k GPU-hours per ~1k steps for the 8B runs (§1.3)
EVAL_EVERY_STEPS = 100
PROMPTS, GENERATIONS = 1000, 16  # §1.2: 1,000 held-out prompts, mean@16
KAPPA = 30.0  # Beta concentration of per-prompt pass probabilities
FLOPS_PER_GPU_HOUR = 3.6e18  # an illustrative 1 PFLOP/s sustained per GPU

# name -> (C_mid, B, A, budget GPU-hours, provenance)
CURVES = {
    "scalerl": (2542, 1.92, 0.610, 16_000, "Table 1 row ScaleRL"),
    "loo-dapo": (3100, 1.77, 0.605, 16_000, "B = 1.77 from §3.3 text; C_mid, A illustrative"),
    "loo-savg": (2900, 1.80, 0.600, 16_000, "illustrative LOO-like variant of ScaleRL"),
    "loo-8op": (3300, 1.85, 0.615, 16_000, "illustrative LOO-like variant of ScaleRL"),
    "loo-fp32": (2700, 1.70, 0.595, 16_000, "illustrative LOO-like variant of ScaleRL"),
    "scalerl-32k": (11272, 1.89, 0.645, 40_000, "Table 1 row ScaleRL-32k"),
}


def evaluate(reward: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mean@16 over 1,000 prompts whose pass probabilities scatter around ``reward``."""
    out = np.empty_like(reward)
    for i, r in enumerate(reward):
        p = rng.beta(KAPPA * r, KAPPA * (1.0 - r), size=PROMPTS)  # (PROMPTS,)
        out[i] = rng.binomial(GENERATIONS, p).sum() / (PROMPTS * GENERATIONS)
    return out


def simulate(name: str, seed: int) -> dict[str, np.ndarray]:
    c_mid, b, a, budget, _ = CURVES[name]
    steps = np.arange(0, int(budget / GPU_HOURS_PER_STEP) + 1, EVAL_EVERY_STEPS)
    gpu_hours = steps * GPU_HOURS_PER_STEP
    truth = sigmoid(gpu_hours, a, b, c_mid, R0)
    # one generator per (curve, seed) so adding a curve leaves the others unchanged
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    return {"step": steps, "gpu_hours": gpu_hours, "val_pass_rate": evaluate(truth, rng)}


def header(name: str, seed: int) -> str:
    c_mid, b, a, budget, origin = CURVES[name]
    return (
        f"SYNTHETIC example curve '{name}' (noise seed {seed}), not real training data: "
        f"ScaleRL sigmoid with C_mid={c_mid}, B={b}, A={a}, R0={R0} ({origin}); mean@16 "
        f"binomial-like noise over {PROMPTS} prompts; made by scripts/make_example_curves.py."
    )


def write_csv(path: Path, name: str, seed: int, data: dict[str, np.ndarray]) -> None:
    with path.open("w", newline="") as handle:
        handle.write(f"# {header(name, seed)}\n")
        writer = csv.writer(handle)
        writer.writerow(["step", "gpu_hours", "val_pass_rate"])
        for s, c, r in zip(data["step"], data["gpu_hours"], data["val_pass_rate"]):
            writer.writerow([int(s), f"{c:g}", f"{r:.5f}"])


def write_trainer_jsonl(path: Path, name: str, seed: int, data, max_gpu_hours: float) -> None:
    """The layout ``scalerl train`` logs: training records, plus val fields on eval steps."""
    evals = {int(s): float(r) for s, r in zip(data["step"], data["val_pass_rate"])}
    rng = np.random.default_rng(seed)
    last_step = int(max_gpu_hours / GPU_HOURS_PER_STEP)
    with path.open("w") as handle:
        handle.write(json.dumps({"_comment": header(name, seed)}) + "\n")
        for step in range(0, last_step + 1, EVAL_EVERY_STEPS // 2):
            hours = step * GPU_HOURS_PER_STEP
            record = {
                "step": step,
                "compute_gpu_hours": round(hours, 6),
                "flops": hours * FLOPS_PER_GPU_HOUR,
                "train_reward": round(float(np.clip(rng.normal(0.45, 0.05), 0, 1)), 4),
            }
            if step in evals:
                record["val_pass_rate"] = round(evals[step], 5)
            handle.write(json.dumps(record) + "\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for seed in range(3):
        data = simulate("scalerl", seed)
        write_csv(OUT / f"synthetic_scalerl_seed{seed}.csv", "scalerl", seed, data)
        if seed == 0:
            half = CURVES["scalerl"][3] / 2
            write_trainer_jsonl(
                OUT / "synthetic_scalerl_seed0_half.jsonl", "scalerl", 0, data, half
            )
    for name in ("loo-dapo", "loo-savg", "loo-8op", "loo-fp32", "scalerl-32k"):
        write_csv(OUT / f"synthetic_{name}.csv", name, 0, simulate(name, 0))
    print(f"wrote synthetic example curves to {OUT}")


if __name__ == "__main__":
    main()
