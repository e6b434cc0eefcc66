"""The workload both trainer benchmarks share: one saved tiny model, one task, one step shape.

A randomly initialised model (no SFT warm-up) is enough for throughput: what a step costs
depends on the batch shape and the completion lengths, not on what the model knows. So that
every completion reaches the learner whatever the rewards, the benches switch off the filters
that would shrink the batch (zero-variance filter, truncation drop): every side trains on all
P x G completions, like TRL does.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from scalerl.runfolder import read_records


@dataclass(frozen=True)
class Workload:
    preset: str = "nano"
    """``scalerl.models.build_model`` size preset."""
    prompts: int = 2
    """P: prompts per optimiser step."""
    generations: int = 8
    """G: completions per prompt."""
    max_new_tokens: int = 128
    """Completion budget (no forced interruptions, EOS may end a completion early)."""
    temperature: float = 1.0
    lr: float = 1e-5

    @property
    def completions_per_step(self) -> int:
        return self.prompts * self.generations


def add_workload_args(ap) -> None:
    """The workload flags both trainer benches share (model preset, P, G, length)."""
    ap.add_argument("--preset", default="nano")
    ap.add_argument("--prompts", type=int, default=2, help="P per optimiser step")
    ap.add_argument("--generations", type=int, default=8, help="G per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128)


def save_base_model(preset: str, directory: Path, seed: int = 0) -> Path:
    """Build a fresh ``preset`` model with the task tokenizer and save it as an HF directory."""
    from scalerl.models import build_model, build_task_tokenizer, save_pretrained

    tokenizer = build_task_tokenizer()
    model = build_model(preset, len(tokenizer), tokenizer=tokenizer, seed=seed)
    return save_pretrained(model, tokenizer, directory)


def scalerl_overrides(work: Workload, model_dir: Path, steps: int, **extra) -> list[str]:
    """``--set`` overrides that make ``scalerl train`` run ``work`` and nothing else."""
    values = {
        "model.base": str(model_dir),
        "pipeline.prompts_per_step": work.prompts,
        "pipeline.generations": work.generations,
        "pipeline.prompts_per_chunk": work.prompts,  # one step's prompts per engine call, like TRL
        "sampling.max_new_tokens": work.max_new_tokens,
        "sampling.temperature": work.temperature,
        "length.control": "none",
        "length.truncation": "keep",
        "filters.zero_variance": False,
        "optim.lr": work.lr,
        "optim.micro_batch": work.completions_per_step,
        "train.cores": 2,  # 1 learner thread + 1 generator on any machine: the 2-core comparison
        "train.steps": steps,
        "train.checkpoint_every": 10_000,
        "eval.every": 10_000, "eval.schedule": "every",  # evaluations only at step 0 and the last step, outside the window
        "eval.num_prompts": 2,
        "eval.k": 1,
        "log.progress": False,
        "log.tensorboard": False,
    }
    values.update(extra)
    return [f"{k}={v}" for k, v in values.items()]


@dataclass(frozen=True)
class Measured:
    completions_per_s: float
    tokens_per_s: float
    """Generated completion tokens per second (what the learner trained on)."""
    mean_len: float
    seconds: float
    steps: int
    # the learner's own per-step metrics, means over the timed window (scalerl runs only)
    learner_busy_s: float | None = None
    """Seconds per step the learner spent training (``learner_busy_s``)."""
    learner_wait_s: float | None = None
    """Seconds per step the learner waited for P admissible groups (``learner_wait_s``)."""
    learner_mfu: float | None = None
    """``learner_mfu``: 6·N·trained tokens / busy seconds / the learner process's matmul peak."""
    learner_flop_s: float | None = None
    """``learner_flop_s``: 6·N·trained tokens / busy seconds."""


def measure_window(work: Workload, run_dir: Path, *, warmup: int, steps: int) -> Measured:
    """Throughput and the learner's role times over steps ``warmup+1 .. warmup+steps`` of
    ``run_dir/metrics.jsonl`` (timed from the per-step ``wall_s``)."""
    records = {r["step"]: r for r in read_records(run_dir / "metrics.jsonl")}
    window = [records[s] for s in range(warmup + 1, warmup + steps + 1)]
    seconds = records[warmup + steps]["wall_s"] - records[warmup]["wall_s"]

    def mean(key: str) -> float:
        return sum(r[key] for r in window) / len(window)

    mean_len = mean("completion_len")
    n = steps * work.completions_per_step
    return Measured(n / seconds, n * mean_len / seconds, mean_len, seconds, steps,
                    learner_busy_s=mean("learner_busy_s"), learner_wait_s=mean("learner_wait_s"),
                    learner_mfu=mean("learner_mfu"), learner_flop_s=mean("learner_flop_s"))


def run_scalerl(work: Workload, model_dir: Path, run_dir: Path, *, warmup: int, steps: int,
                **extra) -> Measured:
    """Train ``warmup + steps + 1`` steps; time steps ``warmup+1 .. warmup+steps`` from the
    per-step ``wall_s`` of ``metrics.jsonl`` (evaluations at step 0 and the extra last step
    fall outside that window)."""
    from scalerl.config import load_config
    from scalerl.pipeline.run import train

    cfg = load_config("scalerl", scalerl_overrides(work, model_dir, warmup + steps + 1, **extra))
    train(cfg, run_dir, log=lambda *_: None)
    return measure_window(work, run_dir, warmup=warmup, steps=steps)


def _matmuls(start_at: float, seconds: float) -> float:
    """Single-thread 256x256 matmuls per second, timed from wall-clock ``start_at``."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    while time.time() < start_at:
        time.sleep(0.01)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ a
        n += 1
    return n / seconds


def median_seconds(fn, repeats: int, clock=time.perf_counter, warmup: bool = False) -> float:
    """Median of ``repeats`` timed calls of ``fn`` on ``clock`` (after one untimed call with
    ``warmup``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def parallel_scaling(seconds: float = 2.0) -> float:
    """Throughput of two single-thread processes together over one alone, right now.

    This is the machine's own ceiling for overlapping two roles (2.0 on two free cores; less
    when other work shares them), measured just before the modes run."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        # both workers up (torch imported) before anything is timed: each holds one warm-up
        # task until a common moment, so neither can take the other's
        list(pool.map(_matmuls, [time.time() + 6.0] * 2, [0.1] * 2))
        alone = pool.submit(_matmuls, time.time(), seconds).result()
        start = time.time() + 0.2
        pair = [pool.submit(_matmuls, start, seconds) for _ in range(2)]
        return sum(f.result() for f in pair) / alone


def synthetic_groups(P: int, G: int, length: int, vocab: int, seed: int = 0) -> list:
    """P groups of G random completions of ``length`` tokens after a 16-token prompt, rewards
    alternating ±1 so every group trains: a fixed learner workload, no generation needed."""
    import numpy as np

    from scalerl.types import Completion, Group

    rng = np.random.default_rng(seed)
    groups = []
    for p in range(P):
        prompt = rng.integers(5, vocab, size=16)
        comps = [Completion(prompt_tokens=prompt, tokens=rng.integers(5, vocab, size=length),
                            logprobs=np.full(length, -3.0, dtype=np.float32), versions=np.zeros(length, dtype=np.int64),
                            loss_mask=np.ones(length, dtype=bool), finish_reason="stop") for _ in range(G)]
        groups.append(Group(p, comps, np.array([1.0, -1.0] * (G // 2), dtype=np.float32)))
    return groups
