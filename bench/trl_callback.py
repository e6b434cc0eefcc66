"""What ``ForecastCallback`` adds to a TRL step, measured side by side (issue 61: aim <= 2%).

The same ``GRPOTrainer`` run (``vs_trl.trl_trainer``: one saved random-init model, the addition
task, P prompts x G completions a step, TRL's own evaluation every ``--eval-every`` steps) twice
per round, without and with ``ForecastCallback(metric="eval_reward", target=0.8, out=FOLDER)``:
the callback writes its run folder and makes the run's forecast at every evaluation in its
background thread, as a user runs it. The arms alternate inside each round (which goes first
swaps every round), so a drift of the machine's speed falls on both.

Timed: ``on_train_begin`` to ``on_train_end`` of the trainer (every step and evaluation, and
the callback's wait for its last forecast at the end), by a clock callback that is in both arms.
The per-round ratio with / without is printed, and the median over rounds is the figure;
the machine's parallel scaling is printed at the start.

Usage: python bench/trl_callback.py [--steps 40] [--eval-every 10] [--eval-prompts 8]
       [--rounds 3] [--preset nano] [--prompts 2] [--generations 8] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)
sys.path.insert(0, str(Path(__file__).parent))
from _workload import Workload, add_workload_args, parallel_scaling, save_base_model  # noqa: E402
from vs_trl import trl_trainer  # noqa: E402


def one_arm(work: Workload, model_dir: Path, scratch: Path, *, steps: int, eval_every: int, eval_prompts: int,
            forecast: bool) -> tuple[float, int]:
    """Seconds of one ``train()`` (begin to end) and the forecasts the callback made (0 without)."""
    from transformers import TrainerCallback

    from scalerl.integrations.trl import ForecastCallback

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.begin = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            self.end = time.perf_counter()

    clock = Clock()
    callbacks = [ForecastCallback(metric="eval_reward", target=0.8, out=scratch / "run")] if forecast else []
    trainer = trl_trainer(work, model_dir, scratch / "trl", steps=steps, callbacks=[*callbacks, clock],
                          eval_every=eval_every, eval_prompts=eval_prompts)
    # the clock last: on_train_end after the callback's wait for its last forecast
    trainer.train()
    made = sum(1 for h in trainer.state.log_history if "forecast/state_code" in h)
    return clock.end - clock.begin, made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--eval-prompts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the trainer")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.set_defaults(max_new_tokens=32)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    print(f"parallel scaling {parallel_scaling():.2f}x (two single-thread processes against one); "
          f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    work = Workload(preset=a.preset, prompts=a.prompts, generations=a.generations, max_new_tokens=a.max_new_tokens)
    rows = []
    with tempfile.TemporaryDirectory(prefix="scalerl-trl-cb-") as tmp:
        base = save_base_model(a.preset, Path(tmp) / "base")
        kw = {"steps": a.steps, "eval_every": a.eval_every, "eval_prompts": a.eval_prompts}
        for r in range(a.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {}
            for forecast in order:
                scratch = Path(tmp) / f"r{r}{'f' if forecast else 'n'}"
                got[forecast] = one_arm(work, base, scratch, forecast=forecast, **kw)
            (plain, _), (withf, made) = got[False], got[True]
            rows.append({"round": r, "without_s": plain, "with_s": withf, "forecasts": made, "ratio": withf / plain})
            print(f"round {r}: without {plain:.2f} s, with {withf:.2f} s ({made} forecasts logged): "
                  f"{withf / plain:.4f}x", flush=True)  # fmt: skip
    ratio = statistics.median(row["ratio"] for row in rows)
    step = statistics.median(row["without_s"] for row in rows) / a.steps
    print(f"{a.preset}, P={a.prompts} G={a.generations} L={a.max_new_tokens}, {a.steps} steps, evaluation every "
          f"{a.eval_every} ({a.eval_prompts} prompts): a step {step:.3f} s without the callback; with / without, "
          f"median of {a.rounds} rounds: {ratio:.4f}x ({100 * (ratio - 1):+.1f}% a step)")  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "ratio": ratio, "step_s": step, "args": vars(a)}, default=str))


if __name__ == "__main__":
    main()
