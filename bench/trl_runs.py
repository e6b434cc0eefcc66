"""Long TRL ``GRPOTrainer`` runs with evaluations: real curves from another trainer for the forecast bench.

Issue 21 (item 5) asks whether the law's intervals hold on curves this project did not make.
This script makes them: several runs of TRL's GRPO trainer on the built-in addition task,
each ``--steps`` optimiser steps long, with different seeds and learning rates, evaluated
every ``--eval-every`` steps. Every run starts from one SFT-warmed nano model (the same
warm-up ``scalerl train`` runs, into the band [0.2, 0.4]; cached under ``--cache``), so the
curves start low and have room to climb, as a lab's runs of related recipes from one base do.

The trainer is ``vs_trl.py``'s (``vs_trl.trl_trainer``: P prompts x G completions per
optimiser step, CISPO with eps_max 5, no KL, constant LR), and the evaluation is this trainer's: one completion per
validation prompt, sampled at temperature 1 through ``scalerl.rollout.validate`` on the
first ``--eval-prompts`` validation problems, so ``val_pass_rate`` means what it means in a
``scalerl train`` log.

Each run writes ``OUT/trl_s{seed}_lr{lr}.jsonl``, one line per evaluation::

    {"step": 0, "completions": 0, "val_pass_rate": 0.27, "train_reward": null, "seconds": 0.0}

which ``scalerl fit FILE --x step`` reads as it is. Runs go ``--jobs`` at a time in separate
processes, one torch thread each.

Usage: python bench/trl_runs.py [--runs 0:5e-5 1:5e-5 ...] [--steps 1000] [--eval-every 40]
       [--eval-prompts 256] [--jobs 2] [--out bench/data]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)
sys.path.insert(0, str(Path(__file__).parent))
from _workload import Workload  # noqa: E402
from vs_trl import trl_trainer  # noqa: E402

DEFAULT_RUNS = ["0:5e-5", "1:5e-5", "2:1e-4", "3:1e-4", "4:3e-5", "5:3e-5", "6:7e-5", "7:7e-5"]


def sft_base(cache: Path, preset: str) -> Path:
    """The SFT-warmed start every run shares (built once, then read from ``cache``)."""
    from scalerl.data.tasks import get_task
    from scalerl.models import build_model, build_task_tokenizer
    from scalerl.pipeline.sft import SFTSpec, sft_warmup

    out = cache / f"trl-base-{preset}"
    if (out / "sft_result.json").is_file():
        return out
    tokenizer = build_task_tokenizer()
    model = build_model(preset, len(tokenizer), tokenizer=tokenizer, seed=0)
    result = sft_warmup(get_task("addition"), model, tokenizer, SFTSpec((0.2, 0.4), max_steps=1000), output_dir=out)
    print(f"SFT warm-up: pass rate {result.pass_rate:.3f} after {result.steps} steps", flush=True)
    return out


def one_run(base: Path, out: Path, seed: int, lr: float, *, steps: int, eval_every: int,
            eval_prompts: int, work: Workload) -> str:
    """``steps`` GRPOTrainer steps from ``base``, evaluated at step 0 and every ``eval_every``."""
    import torch
    from transformers import TrainerCallback

    from scalerl.data.tasks import get_task
    from scalerl.pipeline.sft import engine_pass_rate

    torch.set_num_threads(1)
    work = dataclasses.replace(work, lr=lr)
    task = get_task("addition")
    log_path = out / f"trl_s{seed}_lr{lr:g}.jsonl"
    partial = log_path.with_suffix(".jsonl.partial")
    partial.unlink(missing_ok=True)
    t0 = time.perf_counter()

    class Evaluate(TrainerCallback):
        """Evaluates at step 0 and every ``eval_every`` steps; the same seed at every evaluation."""

        def evaluate(self, state, model, tokenizer) -> None:
            was_training = model.training
            model.eval()
            rate = engine_pass_rate(model, tokenizer, task, eval_prompts, seed=1234)
            model.train(was_training)
            rewards = [h["reward"] for h in state.log_history[-eval_every:] if "reward" in h]
            row = {"step": state.global_step, "completions": state.global_step * work.completions_per_step,
                   "val_pass_rate": rate,
                   "train_reward": sum(rewards) / len(rewards) if rewards else None,
                   "seconds": round(time.perf_counter() - t0, 2)}
            with partial.open("a") as f:
                f.write(json.dumps(row) + "\n")

        def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
            self.evaluate(state, model, processing_class)

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
            if state.global_step % eval_every == 0:
                self.evaluate(state, model, processing_class)

    with tempfile.TemporaryDirectory(prefix="scalerl-trl-") as scratch:  # TRL's output_dir: nothing is saved
        trainer = trl_trainer(work, base, Path(scratch), steps=steps, seed=seed,
                              callbacks=[Evaluate()], first_example=seed * work.prompts * steps)
        trainer.train()
    partial.replace(log_path)  # a finished run only: a killed one leaves its .partial
    return f"{log_path.name}: {steps} steps in {time.perf_counter() - t0:.0f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, help="SEED:LR per run")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=2, help="P per optimiser step")
    ap.add_argument("--generations", type=int, default=8, help="G per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--preset", default="nano")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "scalerl-bench")
    args = ap.parse_args()
    try:
        runs = [(int(s), float(lr)) for s, lr in (r.split(":") for r in args.runs)]
    except ValueError:
        ap.error("--runs takes SEED:LR values, e.g. 0:5e-5")
    args.out.mkdir(parents=True, exist_ok=True)
    base = sft_base(args.cache, args.preset)
    work = Workload(args.preset, args.prompts, args.generations, args.max_new_tokens)
    kw = dict(steps=args.steps, eval_every=args.eval_every, eval_prompts=args.eval_prompts, work=work)
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(one_run, base, args.out, seed, lr, **kw) for seed, lr in runs]
        for f in futures:
            print(f.result(), flush=True)


if __name__ == "__main__":
    sys.exit(main())
