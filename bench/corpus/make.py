"""Make the forecast corpus: finished real runs of several recipes and tasks, one at a time.

A forecast is judged on real runs, not on curves drawn from its own law (issue 36). This
script makes them on this machine and keeps a compact record of each:

    bench/corpus/<family>/<run>.jsonl   one line per evaluation (``scalerl fit`` reads it as is):
        {"step", "wall_s", "compute_gpu_hours", "val_pass_rate", "val_reward_mean",
         "train_reward", "entropy"}   (the last two: means over the steps since the evaluation before)
    bench/corpus/index.json             one entry per finished run: family, recipe, task, seed,
                                        lr, steps, wall seconds, the load average at its start
                                        and end, the scalerl commit, and when it was made

A **family** is a recipe on a task (``FAMILIES``); each has several seeds and learning rates.
Runs go round-robin over the families, so a corpus stopped part way has every family. The
script **resumes**: a run already in the index is skipped; a run killed part way leaves no
record and is made again. Runs record wall time, which is data: run it on a quiet machine
(``uptime`` load below 1), one run at a time, and nothing else beside it; each run's load
average at its start and end is kept so that a disturbed one can be told apart.

scalerl runs are ``scalerl train`` subprocesses (both cores, the recipe's own split) in a
scratch folder that is deleted after its records are kept; each makes its own SFT warm-up,
except in a family with a ``warmup``, whose runs all start from one warm-up made before the
first run's clock starts (``shared_base``); the TRL family is TRL's
``GRPOTrainer`` (``bench/trl_runs.py``'s trainer and evaluation) from the SFT-warmed nano
model, with the same validation as a ``scalerl train`` log and its wall time from the
first evaluation.

Usage: python bench/corpus/make.py [--family NAME ...] [--max-runs N] [--list]
Extend: add seeds or learning rates to a family in ``FAMILIES`` (or a new family) and run
again: only the new runs are made.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
INDEX = HERE / "index.json"
KEEP = ("step", "wall_s", "compute_gpu_hours", "val_pass_rate", "val_reward_mean")
CADENCE = ("eval.schedule=every", "eval.num_prompts=null")
"""The evaluations the families before the planned ones were made with (every ``eval.every`` steps,
50 unless a family sets it, on the task's whole validation split): the defaults of their day."""


@dataclass(frozen=True)
class Family:
    name: str
    recipe: str  # a scalerl recipe, or "trl" for TRL's GRPOTrainer
    task: str
    steps: int
    runs: tuple[tuple[int, float], ...]  # (seed, lr)
    sets: tuple[str, ...] = ()  # extra --set KEY=VALUE for scalerl runs
    trl_args: tuple[str, ...] = ()  # extra trl_one.py options for TRL runs
    warmup: tuple[str, ...] | None = None  # --set of one SFT warm-up every run starts from (None: each its own)
    evaluation: tuple[str, ...] = CADENCE  # the evaluations' --set: the cadence the family was made with

    @property
    def base(self) -> Path:
        """The shared warm-up's model (``warmup``), made once by ``shared_base``."""
        return BASES / self.name / "base_model"

    def run_name(self, seed: int, lr: float) -> str:
        return f"s{seed}_lr{lr:g}"

    def train_sets(self, seed: int, lr: float) -> list[str]:
        """The ``--set``s of one scalerl run of this family."""
        base = (f"model.base={self.base}",) if self.warmup is not None else ()
        return [f"train.seed={seed}", f"optim.lr={lr}", f"train.steps={self.steps}", "train.max_minutes=null",
                *self.evaluation, *self.sets, *base]  # fmt: skip


def _grid(seeds, lrs) -> tuple[tuple[int, float], ...]:
    return tuple((s, lr) for lr in lrs for s in seeds)


# The SFT-warmed nano model the TRL runs start from (bench/trl_runs.py's sft_base), and the
# TRL runs' workload (P 2 x G 8, 32 new tokens, 512 validation prompts every 40 steps, the addition
# task's own 1-3 digits where scalerl's config defaults to 1-2), so that scalerl's trl-grpo recipe
# runs exactly what TRL's GRPOTrainer does with its defaults (issue 37).
TRL_BASE = Path.home() / ".cache" / "scalerl-bench" / "trl-base-nano"
TRL_WORKLOAD = (f"model.base={TRL_BASE}", "pipeline.prompts_per_step=2", "pipeline.generations=8",
                "sampling.max_new_tokens=32", "eval.every=40", "eval.schedule=every", "eval.num_prompts=512",
                "task.knobs.max_digits=3")

# The math family's data and base model (issue 48, item 6: the math task with math-verify). The
# records are linear equations whose answer is a sum ("x - 12 = 30" -> 42, the column addition
# as the solution to imitate), generated here with a fixed seed, so no data set is downloaded;
# the reward is Math-Verify's check of the \\boxed{} answer. The "x = a + b:" line and the
# 11-token boxed answer need a longer budget than addition's. The nano model is SFT-warmed
# once into MATH_BAND and every run starts from that base, as the TRL families start from one.
# A family with a ``warmup`` shares one SFT warm-up (``BASES/<family>``), made before any run's
# clock starts: the nano model's warm-up takes 1-3 minutes, about as long as these families' RL.
BASES = Path.home() / ".cache" / "scalerl-bench" / "bases"
TOOLS_LONG = ("task.knobs.max_digits=4", "env.max_turns=4", "env.max_tokens=128", "sampling.max_new_tokens=48")
MATH_DATA = Path.home() / ".cache" / "scalerl-bench" / "math-linear" / "problems.jsonl"
MATH_TASK = ("task.name=math", f"task.knobs.path={MATH_DATA}", "task.knobs.num_validation=200",
             "task.knobs.solution_field=solution", "task.knobs.prompt_template=Solve for x: {problem}.",
             "length.interrupt_range=[48,56]", "length.answer_budget=16", "sampling.max_new_tokens=90")
MATH_BAND = ("model.sft.target_band=[0.15,0.4]", "model.sft.max_steps=4000")
GPT2 = ("model.arch=gpt2",)
# The code family (issue 48, item 6: the code task in the sandbox). Each record asks for
# ``f(x) = a*x +/- b`` as a Python function, scored by three function tests run in the sandbox
# (``scalerl.data.sandbox``, one locked-down process per program); generated here with a fixed
# seed. One sandboxed program costs about 51 ms here, so the batch is 4 prompts x 8 (1.6 s of
# sandbox a step at 8 x 8, measured in a 60-step pilot: 3.8 s a step, the learner waiting on
# the rewards) and the validation 200 held-out prompts.
CODE_DATA = Path.home() / ".cache" / "scalerl-bench" / "code-linear" / "problems.jsonl"
CODE_TASK = ("task.name=code", f"task.knobs.path={CODE_DATA}", "task.knobs.num_validation=200",
             "task.knobs.solution_field=solution", "task.knobs.prompt_template=f(x) = {problem}",
             "sampling.max_new_tokens=64", "length.interrupt_range=[44,52]", "length.answer_budget=12")
CODE_BAND = ("model.sft.target_band=[0.15,0.4]", "model.sft.max_steps=3000")

FAMILIES = (
    Family("scalerl-addition", "scalerl", "addition", 1200, _grid((0, 1, 2), (5e-5, 1e-4, 2e-4))),
    Family("grpo-addition", "deepseek-grpo", "addition", 1200, _grid((0, 1, 2), (5e-5, 1e-4))),
    Family("scalerl-multiplication", "scalerl", "multiplication", 1200, _grid((0, 1, 2), (1e-4, 2e-4)),
           ("task.name=multiplication",)),
    Family("scalerl-tools", "scalerl-tools", "calculator", 900, _grid((0, 1, 2), (5e-5, 1e-4))),
    Family("trl-grpo-addition", "trl", "addition", 1000, _grid((0, 1, 2), (5e-5, 1e-4))),
    Family("scalerl-sync-addition", "scalerl", "addition", 1200, _grid((0, 1, 2), (1e-4, 2e-4)),
           ("pipeline.mode=sync",)),
    Family("trl-defaults-addition", "trl", "addition", 1000, _grid((0, 1, 2), (5e-5,)),
           trl_args=("--loss", "dapo", "--eval-like-scalerl", "32")),
    Family("scalerl-trl-grpo-addition", "trl-grpo", "addition", 1000, _grid((0, 1, 2), (5e-5,)), TRL_WORKLOAD),
    # Issue 48, item 6: the shapes the corpus lacked. Learning rates 2-3x the addition family's
    # highest, for collapses (at 1e-3, tried first, a run fell from 0.31 to 0 within 32 steps);
    # a warm-up stopped low, for slow starts (stopped at 0.035, tried first, a run stayed at
    # 0.01-0.02 for 600 steps: too cold to learn at all); the calculator at longer operands and
    # more turns; the math task with Math-Verify.
    Family("scalerl-addition-hot", "scalerl", "addition", 500, _grid((0, 1, 2, 3), (4e-4, 6e-4)),
           ("eval.every=20",), warmup=()),
    Family("scalerl-addition-cold", "scalerl", "addition", 700, _grid((0, 1, 2), (1e-4, 2e-4)),
           ("eval.every=20",), warmup=("model.sft.target_band=[0.08,0.14]", "model.sft.force=true")),
    Family("scalerl-tools-long", "scalerl-tools", "calculator", 450, _grid((0, 1, 2), (5e-5, 1e-4)),
           (*TOOLS_LONG, "eval.every=15"), warmup=TOOLS_LONG),
    Family("scalerl-math", "scalerl", "math", 800, _grid((0, 1, 2, 3), (5e-5, 1e-4))[:7],
           (*MATH_TASK, "eval.every=25"), warmup=(*MATH_TASK, *MATH_BAND)),
    # GPT-2 with LoRA: a fresh GPT-2 nano (model.arch=gpt2) SFT-warmed once, then RL on rank-16
    # adapters only (c_attn, c_proj, c_fc), at LoRA's usual 5-10x the full model's learning rate
    # (a 300-step pilot at 1e-3 rose 0.24 -> 0.40).
    Family("scalerl-gpt2-lora-addition", "scalerl", "addition", 600, _grid((0, 1, 2), (5e-4, 1e-3)),
           ("model.lora.rank=16", "eval.every=25"), warmup=GPT2),
    # The code task in the sandbox: 300 steps of 4 x 8 at 2x and 6x the recipe's learning rate
    # (at 5e-5 and 8 x 8, the pilot rose 0.14 -> 0.175 in 60 steps).
    Family("scalerl-code", "scalerl", "code", 300, _grid((0, 1), (1e-4, 3e-4)),
           (*CODE_TASK, "pipeline.prompts_per_step=4", "eval.every=20"), warmup=(*CODE_TASK, *CODE_BAND)),
)


def _index() -> dict:
    return json.loads(INDEX.read_text()) if INDEX.is_file() else {}


def _save_index(index: dict) -> None:
    tmp = INDEX.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    tmp.replace(INDEX)  # atomic: a killed script never leaves half an index


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip()


def compact(records: list[dict]) -> list[dict]:
    """One row per evaluation: ``KEEP``'s fields, and the mean training reward and entropy of
    the steps since the evaluation before (None where no step logged them)."""
    rows, rewards, entropies = [], [], []
    for rec in records:
        if rec.get("reward_mean") is not None:
            rewards.append(float(rec["reward_mean"]))
        if rec.get("entropy") is not None:
            entropies.append(float(rec["entropy"]))
        if rec.get("val_pass_rate") is None:
            continue
        row = {k: rec.get(k) for k in KEEP}
        row["train_reward"] = sum(rewards) / len(rewards) if rewards else None
        row["entropy"] = sum(entropies) / len(entropies) if entropies else None
        rows.append(row)
        rewards, entropies = [], []
    return rows


def math_data() -> None:
    """``MATH_DATA``: 6000 distinct "x - a = b" with a, b in 1..99 (seed 0), each with the column
    addition of a + b as its solution; made once."""
    import random

    from scalerl.data.tasks.addition import scratchpad

    if MATH_DATA.is_file():
        return
    rng, seen, rows = random.Random(0), set(), []
    while len(rows) < 6000:
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        if (a, b) not in seen:
            seen.add((a, b))
            rows.append({"problem": f"x - {a} = {b}", "answer": str(a + b),
                         "solution": f"x = {a} + {b}: {scratchpad([a, b])}"})
    MATH_DATA.parent.mkdir(parents=True, exist_ok=True)
    MATH_DATA.write_text("".join(json.dumps(r) + "\n" for r in rows))


def code_data() -> None:
    """``CODE_DATA``: 6000 distinct ``a*x +/- b`` (a in 2..19, b in 1..299, seed 0), each with three
    function tests at distinct x in 1..29 and the one-line solution; made once."""
    import random

    if CODE_DATA.is_file():
        return
    rng, seen, rows = random.Random(0), set(), []
    while len(rows) < 6000:
        a, b, op = rng.randint(2, 19), rng.randint(1, 299), rng.choice("+-")
        if (a, b, op) in seen:
            continue
        seen.add((a, b, op))
        xs = rng.sample(range(1, 30), 3)
        rows.append({"problem": f"{a}*x {op} {b}",
                     "tests": [f"assert f({x}) == {a * x + b if op == '+' else a * x - b}" for x in xs],
                     "solution": f"def f(x): return {a}*x{op}{b}"})
    CODE_DATA.parent.mkdir(parents=True, exist_ok=True)
    CODE_DATA.write_text("".join(json.dumps(r) + "\n" for r in rows))


def train_command(recipe: str, out: Path, sets: list[str]) -> list[str]:
    """``scalerl train --recipe RECIPE --out OUT --no-fit --set ...``, this checkout's."""
    cmd = [str(ROOT / ".venv/bin/scalerl"), "train", "--recipe", recipe, "--out", str(out), "--no-fit"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def shared_base(family: Family) -> None:
    """``family.base``: the nano model SFT-warmed with ``family.warmup`` (``scalerl train`` for one
    RL step, whose cached warm-up is the base), made once."""
    if (family.base / "config.json").is_file():
        return
    cmd = train_command(family.recipe, family.base.parent, [*(family.warmup or ()), "train.steps=1"])
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def scalerl_run(family: Family, seed: int, lr: float) -> list[dict]:
    """``scalerl train`` in a scratch folder; its evaluations, compacted."""
    from scalerl.runfolder import read_records

    with tempfile.TemporaryDirectory(prefix="scalerl-corpus-") as scratch:
        run_dir = Path(scratch) / "run"
        cmd = train_command(family.recipe, run_dir, family.train_sets(seed, lr))
        log = Path(scratch) / "train.log"
        with log.open("w") as f:
            done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=scratch)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{log.read_text()[-3000:]}")
        return compact(read_records(run_dir / "metrics.jsonl"))


def trl_run(family: Family, seed: int, lr: float) -> list[dict]:
    """TRL's ``GRPOTrainer`` (``bench/trl_runs.py``) in a subprocess; its evaluations."""
    with tempfile.TemporaryDirectory(prefix="scalerl-corpus-trl-") as scratch:
        out = Path(scratch) / "rows.jsonl"
        cmd = [str(ROOT / ".venv/bin/python"), str(HERE / "trl_one.py"), "--seed", str(seed), "--lr", str(lr),
               "--steps", str(family.steps), "--out", str(out), *family.trl_args]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def queue(index: dict, only: list[str] | None) -> list[tuple[Family, int, float]]:
    """The runs still to make, round-robin over the families (a part corpus has all of them)."""
    fams = [f for f in FAMILIES if not only or f.name in only]
    todo = [[(f, s, lr) for s, lr in f.runs if f"{f.name}/{f.run_name(s, lr)}" not in index] for f in fams]
    out = []
    while any(todo):
        for lst in todo:
            if lst:
                out.append(lst.pop(0))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", choices=[f.name for f in FAMILIES], help="only these families")
    ap.add_argument("--max-runs", type=int, default=None, help="stop after this many new runs")
    ap.add_argument("--list", action="store_true", help="print what is made and what is left, and exit")
    args = ap.parse_args()
    index = _index()
    todo = queue(index, args.family)
    if args.list:
        total = sum(len(f.runs) for f in FAMILIES)
        hours = sum(v["wall_s_total"] for v in index.values()) / 3600
        print(f"{len(index)} of {total} runs made ({hours:.2f} h of runs); next: "
              + ", ".join(f"{f.name}/{f.run_name(s, lr)}" for f, s, lr in todo[:5]))  # fmt: skip
        return 0
    if any(family.task == "math" for family, _, _ in todo):
        math_data()
    if any(family.task == "code" for family, _, _ in todo):
        code_data()
    for family in {family.name: family for family, _, _ in todo if family.warmup is not None}.values():
        shared_base(family)  # once, before any run's clock starts
    for n, (family, seed, lr) in enumerate(todo):
        if args.max_runs is not None and n >= args.max_runs:
            break
        key = f"{family.name}/{family.run_name(seed, lr)}"
        load0, t0 = os.getloadavg()[0], time.time()
        print(f"[{dt.datetime.now():%H:%M:%S}] {key} (load {load0:.2f}) ...", flush=True)
        try:
            rows = (trl_run if family.recipe == "trl" else scalerl_run)(family, seed, lr)
        except RuntimeError as err:  # a run that cannot finish is no record; the others go on
            print(f"    failed, not recorded (made again on the next call): {err}", flush=True)
            continue
        path = HERE / family.name / f"{family.run_name(seed, lr)}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        index[key] = {"family": family.name, "recipe": family.recipe, "task": family.task, "seed": seed, "lr": lr,
                      "steps": family.steps, "evaluations": len(rows), "wall_s_total": round(time.time() - t0, 1),
                      "wall_s_rl": rows[-1]["wall_s"] if rows else None, "load_start": round(load0, 2),
                      "load_end": round(os.getloadavg()[0], 2), "commit": _commit(),
                      "made": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                      "final_val_pass_rate": rows[-1]["val_pass_rate"] if rows else None}  # fmt: skip
        _save_index(index)
        print(f"    {len(rows)} evaluations, {index[key]['wall_s_total']:.0f} s, val "
              f"{rows[0]['val_pass_rate']:.3f} -> {rows[-1]['val_pass_rate']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
