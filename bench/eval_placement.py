"""Where evaluation runs: on the learner (``eval.on=learner``) vs on a generator (``generator``).

Same workload and ``pipeline-rl`` run both ways, with evaluations *inside* the timed window
(every ``--every`` steps, ``--prompts-eval`` prompts × ``--k`` samples). Inline, the learner
stops for every evaluation; on a generator the learner trains on what the lag buffer holds
while the generator evaluates a weight snapshot. Completions/s over the window count the
training completions only, so the ratio is what the placement costs the training itself.
Also printed: the learner's per-step wait, what one evaluation cost the learner
(``learner_eval_s``) and took on its role (``eval_s``).

Usage: python bench/eval_placement.py [--preset nano] [--prompts 8] [--generations 8]
       [--max-new-tokens 64] [--steps 40] [--every 10] [--prompts-eval 200] [--k 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
warnings.filterwarnings("ignore", category=FutureWarning)
sys.path.insert(0, str(Path(__file__).parent))
from _workload import Workload, add_workload_args, parallel_scaling, run_scalerl, save_base_model  # noqa: E402

from scalerl.runfolder import read_records  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(ap)
    ap.set_defaults(prompts=8, max_new_tokens=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--prompts-eval", type=int, default=200)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    work = Workload(args.preset, args.prompts, args.generations, args.max_new_tokens)
    print(f"machine parallel scaling now (2 single-thread processes vs 1): {parallel_scaling():.2f}x")
    best: dict[str, tuple] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_base_model(args.preset, Path(tmp) / "model")
        for r in range(args.repeats):
            for where in ("learner", "generator"):
                run_dir = Path(tmp) / f"{where}-{r}"
                m = run_scalerl(work, model_dir, run_dir, warmup=args.warmup, steps=args.steps,
                                **{"eval.every": args.every, "eval.schedule": "every", "eval.num_prompts": args.prompts_eval,
                                   "eval.k": args.k, "eval.on": where})
                evals = [x for x in read_records(run_dir / "metrics.jsonl") if "eval_s" in x and x["step"] > 0]
                cost = sum(x["learner_eval_s"] for x in evals) / max(1, len(evals))
                took = sum(x["eval_s"] for x in evals) / max(1, len(evals))
                print(f"eval.on={where:9s} #{r + 1}: {m.completions_per_s:6.1f} completions/s, learner waits "
                      f"{m.learner_wait_s:.3f} s/step, an evaluation costs the learner {cost:.3f} s "
                      f"(takes {took:.2f} s)")
                if where not in best or m.completions_per_s > best[where][0]:
                    best[where] = (m.completions_per_s, cost, took)
    print(f"machine parallel scaling at the end: {parallel_scaling():.2f}x")
    ratio = best["generator"][0] / best["learner"][0]
    print(f"\n{work.prompts}x{work.generations} at L={work.max_new_tokens} ({args.preset}), an evaluation of "
          f"{args.prompts_eval}x{args.k} every {args.every} steps: eval.on=generator trains at {ratio:.2f}x "
          f"eval.on=learner (best of {args.repeats})")


if __name__ == "__main__":
    main()
