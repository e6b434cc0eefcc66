"""One TRL ``GRPOTrainer`` run for the corpus (``make.py`` runs it in a subprocess).

The trainer and the evaluation are ``bench/trl_runs.py``'s (from the SFT-warmed nano model,
P 2 x G 8 of the addition task, CISPO or TRL's default loss (``--loss``), no KL, constant LR; one completion per validation
prompt at temperature 1 through ``scalerl.rollout``), on both of this machine's cores.
Each evaluation writes one row in the corpus format (``make.py``): the device-hours are this
machine's cores x wall hours, as ``scalerl train`` counts them on a CPU, and ``train_reward``
and ``entropy`` are the means of TRL's own logged ``reward`` and ``entropy`` since the
evaluation before.

Usage: python bench/corpus/trl_one.py --seed S --lr LR --steps N --out ROWS.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")
BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))
from _workload import Workload  # noqa: E402
from trl_runs import sft_base  # noqa: E402
from vs_trl import trl_trainer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--loss", choices=("cispo", "dapo"), default="cispo",
                    help="cispo: CISPO eps_max 5 (scalerl's loss); dapo: TRL GRPOConfig's default loss")
    ap.add_argument("--eval-like-scalerl", type=int, default=None, metavar="MAX_NEW_TOKENS",
                    help="validate as `scalerl train` does with this sampling.max_new_tokens and no FP32 head "
                         "(the trl-grpo recipe); default: the SFT warm-up's measure, room for the longest answer")
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--eval-prompts", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "scalerl-bench")
    args = ap.parse_args()

    import torch
    from transformers import TrainerCallback

    from scalerl.data.tasks import get_task
    from scalerl.pipeline.sft import engine_pass_rate
    from scalerl.types import SamplingParams

    torch.set_num_threads(args.threads)
    base = sft_base(args.cache, "nano")
    work = Workload("nano", 2, 8, 32, lr=args.lr)
    task = get_task("addition")
    like_scalerl = {}
    if args.eval_like_scalerl is not None:
        like_scalerl = {"params": SamplingParams(max_new_tokens=args.eval_like_scalerl, temperature=1.0),
                        "fp32_head": False}
    t0 = time.perf_counter()
    rows: list[dict] = []

    class Evaluate(TrainerCallback):
        def evaluate(self, state, model, tokenizer) -> None:
            was_training = model.training
            model.eval()
            rate = engine_pass_rate(model, tokenizer, task, args.eval_prompts, seed=1234, **like_scalerl)
            model.train(was_training)
            recent = [h for h in state.log_history[-args.eval_every:] if "reward" in h]
            mean = lambda key: (sum(h[key] for h in recent if key in h) / max(1, sum(key in h for h in recent))  # noqa: E731
                                if any(key in h for h in recent) else None)  # fmt: skip
            wall = time.perf_counter() - t0
            rows.append({"step": state.global_step, "wall_s": round(wall, 2),
                         "compute_gpu_hours": args.threads * wall / 3600.0, "val_pass_rate": rate,
                         "val_reward_mean": rate, "train_reward": mean("reward"), "entropy": mean("entropy")})  # fmt: skip

        def on_train_begin(self, a, state, control, model=None, processing_class=None, **kw):
            self.evaluate(state, model, processing_class)

        def on_step_end(self, a, state, control, model=None, processing_class=None, **kw):
            if state.global_step % args.eval_every == 0 or state.global_step == args.steps:
                self.evaluate(state, model, processing_class)

    with tempfile.TemporaryDirectory(prefix="scalerl-trl-") as scratch:
        trainer = trl_trainer(work, base, Path(scratch), steps=args.steps, seed=args.seed,
                              callbacks=[Evaluate()], first_example=args.seed * work.prompts * args.steps,
                              loss=args.loss)
        trainer.train()
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
