"""Multi-turn rollouts vs single-turn ones of the same generated length, side by side in one run.

Both arms decode ``--episodes`` calculator prompts (``task.name: calculator``) with the same
nano-sized model, engine and sampling, EOS ignored so every length is exact:

- ``single``: one turn of ``--new-tokens`` tokens per episode (``rollout.SingleTurn``);
- ``multi``: three turns of ``--new-tokens / 3`` tokens, the calculator's answer
  (``<result>VALUE</result>``: the value's digits and 2 tag tokens) appended after the first two
  (``rollout.multi_turn.MultiTurn``). Observations are prefilled, never decoded token by
  token: each turn is one engine call whose prompts are the histories so far; the torch
  engine reuses each row's KV of its history (``TorchEngine.keep_prefixes``) and prefills
  only what follows it.

Reported per arm: completions (episodes) per second and *generated* tokens per second (the
sampled ones; observations are not counted), medians of ``--repeats`` interleaved timed runs
after one warm-up, in this process's CPU time with a fixed number of torch threads (damps,
does not remove, the noise of other jobs). The issue's target: multi-turn's generated
tokens/s at least 80% of single-turn's.

    .venv/bin/python bench/multi_turn.py --episodes 32 --new-tokens 48 --repeats 15
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from scalerl.data.tasks import get_task
from scalerl.data.tasks.calculator import RESULT_CLOSE, RESULT_OPEN
from scalerl.models import build_model, build_task_tokenizer
from scalerl.models.chat import ChatFormat, PromptRenderer
from scalerl.rollout.env import EnvSpec
from scalerl.rollout.rollout import SingleTurn, build_rollout
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import SamplingParams

TURNS = 3


class ThreeTurns:
    """Answers the first two turns, whatever they say, with the problem's value; ends the third."""

    def reset(self, example: dict) -> str:
        self.answer, self.turns = example["answer"], 0
        return example["meta"]["prompt"]

    def step(self, action: str):
        self.turns += 1
        if self.turns >= TURNS:
            return None, 1.0, True
        return f"{RESULT_OPEN}{self.answer}{RESULT_CLOSE}", None, False


def _timed(fn, *args) -> tuple[float, list]:
    start = time.process_time()  # CPU time: on a shared machine wall time measures the neighbours
    out = fn(*args)
    return time.process_time() - start, out


def run(episodes: int, new_tokens: int, repeats: int, preset: str, threads: int, seed: int = 0) -> dict:
    """``{arm: {"completions_per_s", "gen_tokens_per_s", "env_tokens"}}`` and the ratio."""
    torch.set_num_threads(threads)
    tokenizer = build_task_tokenizer()
    model = build_model(preset, len(tokenizer), seed=seed, tokenizer=tokenizer)
    engine = TorchEngine(model, tokenizer, seed=seed, eos_token_ids=())  # exact lengths
    task = get_task("calculator")
    examples = [task.train_example(i) for i in range(episodes)]
    per_turn = max(1, new_tokens // TURNS)
    env = EnvSpec(f"{Path(__file__).resolve()}:ThreeTurns", {}, TURNS, 10 * new_tokens + 200, "last", "tool")
    arms = {
        "single": (SingleTurn(task, PromptRenderer(tokenizer, ChatFormat("none"))),
                   SamplingParams(max_new_tokens=per_turn * TURNS)),
        "multi": (build_rollout(task, tokenizer, ChatFormat("none"), env), SamplingParams(max_new_tokens=per_turn)),
    }
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    shape: dict[str, tuple[int, int]] = {}
    for i in range(repeats + 1):  # interleaved; the first round warms up
        for name, (rollout, params) in arms.items():
            took, out = _timed(rollout.run, engine, examples, 1, params)
            completions = [c for t in out for c in t.completions]
            sampled = sum(int(c.loss_mask.sum()) for c in completions)
            shape[name] = (sampled, sum(c.env_tokens for c in completions))
            if i:
                seconds[name].append(took)
    result = {}
    for name, times in seconds.items():
        t = statistics.median(times)
        result[name] = {"completions_per_s": episodes / t, "gen_tokens_per_s": shape[name][0] / t,
                        "gen_tokens": shape[name][0], "env_tokens": shape[name][1]}
    result["ratio"] = result["multi"]["gen_tokens_per_s"] / result["single"]["gen_tokens_per_s"]
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=48, help="generated tokens per episode (split in 3 turns)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds; 15 steadies the median on a shared VM")
    parser.add_argument("--preset", default="nano")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    result = run(args.episodes, args.new_tokens, args.repeats, args.preset, args.threads)
    print(f"preset={args.preset} episodes={args.episodes} generated tokens/episode={args.new_tokens // TURNS * TURNS} "
          f"threads={args.threads} repeats={args.repeats} (CPU-time medians)")
    print(f"{'arm':>7} {'completions/s':>14} {'gen tokens/s':>13} {'gen tokens':>11} {'env tokens':>11}")
    for name in ("single", "multi"):
        r = result[name]
        print(f"{name:>7} {r['completions_per_s']:14.1f} {r['gen_tokens_per_s']:13.0f} {r['gen_tokens']:11d} "
              f"{r['env_tokens']:11d}")
    print(f"multi/single generated tokens/s = {result['ratio']:.2f} (target >= 0.80)")
    return result


if __name__ == "__main__":
    main()
