"""scalerl (PipelineRL-k, local backend) vs TRL's ``GRPOTrainer`` on the same work, in one run.

Same model (one random-init tiny model saved once; both sides load that directory), same
task (the built-in addition task and its reward), same step shape (P prompts x G completions
per optimiser step, at most L new tokens, temperature 1, no KL, CISPO with eps_max 5 on both
sides, every completion in the loss), same number of timed optimiser steps after the same
warm-up. TRL runs the way it runs on a CPU machine without vLLM: one process that generates
with ``model.generate`` and then trains; we give it its fastest settings here (no gradient
checkpointing, and it runs once per ``--trl-threads`` value — 1 and 2 torch threads by default
— and the ratios are taken against its best run). scalerl runs ``pipeline-rl`` (generator process + learner process,
1 thread each) and, for reference, ``sync`` (same engine, no overlap).

Completions end at EOS or at L on both sides; the mean length is printed beside completions/s
so a length difference cannot hide in the ratio.

Usage: python bench/vs_trl.py [--preset nano] [--prompts 2] [--generations 8]
       [--max-new-tokens 128] [--steps 12] [--warmup 4] [--k 4] [--trl-threads 1 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: both sides load a local dir
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames, not ours
sys.path.insert(0, str(Path(__file__).parent))
from _workload import (  # noqa: E402
    Measured,
    Workload,
    add_workload_args,
    parallel_scaling,
    run_scalerl,
    save_base_model,
)


def trl_trainer(work: Workload, model_dir: Path, out_dir: Path, *, steps: int, seed: int = 0,
                callbacks=(), first_example: int = 0, loss: str = "cispo", eval_every: int = 0,
                eval_prompts: int = 0):
    """TRL's ``GRPOTrainer`` on ``work``: ``steps`` optimiser steps of P prompts x G completions
    of the addition task (examples from ``first_example`` on), no KL, a constant learning rate.
    ``loss="cispo"``: CISPO with eps_max 5 (scalerl's recipe); ``loss="dapo"``: TRL's default
    loss, the clipped surrogate with its default symmetric clip 0.2 and token aggregation.
    ``eval_every``: TRL's own evaluation (``eval_reward``: G completions of each of the first
    ``eval_prompts`` validation problems) every that many steps; 0, none."""
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from scalerl.data.tasks import get_task
    from scalerl.models import load_pretrained

    task = get_task("addition")
    model, tokenizer = load_pretrained(model_dir)
    n_prompts = work.prompts * steps
    examples = [task.train_example(first_example + i) for i in range(n_prompts)]
    dataset = Dataset.from_dict({"prompt": [task.prompt(e) for e in examples], "idx": list(range(n_prompts))})
    held_out = task.validation()[:eval_prompts] if eval_every else []
    examples += held_out  # an evaluation's idx points past the training examples
    evals = Dataset.from_dict({"prompt": [task.prompt(e) for e in held_out],
                               "idx": list(range(n_prompts, n_prompts + len(held_out)))}) if held_out else None
    cadence = {"eval_strategy": "steps", "eval_steps": eval_every,
               "per_device_eval_batch_size": work.completions_per_step} if held_out else {}

    def reward(completions, idx, **_):
        return [task.reward(text, examples[i]) for text, i in zip(completions, idx)]

    args = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, bf16=False, seed=seed, report_to=[], disable_tqdm=True,
        log_level="error", logging_steps=1, save_strategy="no", dataloader_num_workers=0,
        # one optimiser step = one generation round of P prompts x G completions
        per_device_train_batch_size=work.completions_per_step, num_generations=work.generations,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        max_completion_length=work.max_new_tokens, temperature=work.temperature, top_p=1.0,
        max_steps=steps, learning_rate=work.lr, lr_scheduler_type="constant",
        beta=0.0, gradient_checkpointing=False, **cadence,
        **({"loss_type": "cispo", "epsilon_high": 5.0} if loss == "cispo" else {"loss_type": loss}),
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset, eval_dataset=evals,
                          processing_class=tokenizer, callbacks=list(callbacks))
    trainer.remove_callback(PrinterCallback)  # the per-step log dicts; we print our own line
    return trainer


def run_trl(work: Workload, model_dir: Path, out_dir: Path, *, warmup: int, steps: int,
            threads: int) -> Measured:
    """``warmup + steps`` GRPOTrainer steps; the last ``steps`` are timed by a callback."""
    import torch
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    torch.set_num_threads(threads)
    clock = StepClock()
    trainer = trl_trainer(work, model_dir, out_dir, steps=warmup + steps, callbacks=[clock])
    trainer.train()
    seconds = clock.ends[warmup + steps - 1] - clock.ends[warmup - 1]
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    mean_len = sum(lengths[warmup:]) / len(lengths[warmup:])
    n = steps * work.completions_per_step
    return Measured(n / seconds, n * mean_len / seconds, mean_len, seconds, steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap)
    ap.add_argument("--steps", type=int, default=12, help="timed optimiser steps")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps first (>= 1)")
    ap.add_argument("--k", type=int, default=4, help="PipelineRL lag bound")
    ap.add_argument("--trl-threads", type=int, nargs="+", default=[1, 2],
                    help="torch threads of the TRL process; one TRL run per value, the best is the baseline")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds over all runs (interleaved, so load drifts hit every run); best kept")
    args = ap.parse_args()
    if args.warmup < 1:
        ap.error("--warmup must be at least 1 (the first step pays one-off start-up costs)")

    work = Workload(args.preset, args.prompts, args.generations, args.max_new_tokens)
    print(f"workload: {args.preset} model, addition task, P={work.prompts} x G={work.generations}, "
          f"<= {work.max_new_tokens} new tokens, {args.steps} timed steps after {args.warmup}; "
          f"{os.cpu_count()} CPUs")
    print(f"machine parallel scaling now (2 single-thread processes vs 1): {parallel_scaling():.2f}x", flush=True)
    results: dict[str, Measured] = {}
    with tempfile.TemporaryDirectory(prefix="scalerl-vs-trl-") as tmp:
        model_dir = save_base_model(args.preset, Path(tmp) / "base")
        def fresh(prefix: str) -> Path:  # a new directory per run, repeats included
            return Path(tempfile.mkdtemp(prefix=prefix, dir=tmp))

        timing = {"warmup": args.warmup, "steps": args.steps}
        runs = {
            f"TRL GRPOTrainer ({t} thr)": lambda t=t: run_trl(work, model_dir, fresh("trl-"), threads=t, **timing)
            for t in args.trl_threads
        }
        runs |= {
            "scalerl sync": lambda: run_scalerl(work, model_dir, fresh("sync-"), **timing,
                                                **{"pipeline.mode": "sync"}),
            f"scalerl pipeline-rl-{args.k}": lambda: run_scalerl(
                work, model_dir, fresh("pipeline-"), **timing,
                **{"pipeline.mode": "pipeline-rl", "pipeline.k": args.k}),
        }
        for round_, (name, run) in ((r, item) for r in range(args.repeats) for item in runs.items()):
            m = run()
            if name not in results or m.completions_per_s > results[name].completions_per_s:
                results[name] = m
            print(f"  {name:28s} #{round_ + 1} {m.completions_per_s:8.1f} completions/s {m.tokens_per_s:9.0f} tok/s  "
                  f"mean len {m.mean_len:5.1f}  ({m.seconds:.1f} s for {m.steps} steps)", flush=True)
    best = max((n for n in results if n.startswith("TRL")), key=lambda n: results[n].completions_per_s)
    trl = results[best].completions_per_s
    print(f"ratios vs the best TRL run, {best} (completions/s, best of {args.repeats}): " + ", ".join(
        f"{name} {m.completions_per_s / trl:.2f}x" for name, m in results.items() if name.startswith("scalerl")))


if __name__ == "__main__":
    main()
