"""Throughput over a grid of step shapes: TRL vs scalerl ``sync`` vs ``pipeline-rl``, and how
close ``pipeline-rl`` comes to what two cores can give (issue 10, item 6).

For every shape (a model preset, P prompts x G completions per optimiser step, at most L new
tokens) the same workload as ``vs_trl.py`` runs in every variant (one random-init model saved
once per preset, the addition task, every completion in the loss, CISPO, no KL):

- **TRL** ``GRPOTrainer`` once per ``--trl-threads`` value (1 and 2 torch threads by default);
  the row shows the best of them (``vs_trl.run_trl``);
- scalerl **sync** and **pipeline-rl** (k = ``--k``) with the ``local`` backend, 1 torch thread
  per role process (``_workload.run_scalerl``).

Each variant runs in a fresh process (one spawn per variant and round), so nothing a run
leaves behind (imports, thread settings, allocator state, TRL's memory) reaches the next; the
timed window is ``--steps`` optimiser steps after ``--warmup`` untimed ones, as in the other
trainer benches. ``--repeats N`` runs each shape's variants N times, interleaved, and keeps each
variant's best (by completions/s); a shape's rounds run back to back, so a load change hits all
of that shape's variants.

Columns of the table (one row per shape):

- **len T/s/p**: mean completion length of TRL / sync / pipeline-rl. Completions end at EOS or
  at L, and a longer completion costs more, so the **tok/s** beside every completions/s is the
  figure to compare when the lengths differ by more than a few percent.
- **TRL best**, **sync**, **pipeline-rl**: completions/s / generated tokens/s (TRL's thread count
  in brackets).
- **T_gen / T_learn**: seconds per step of the two roles in ``sync``, means over its timed
  window: T_learn is the ``learner_busy_s`` metric, T_gen is ``learner_wait_s`` (in sync the
  learner waits exactly while the generator decodes the step's P x G completions).
- **2-core bound**: ``P·G / ((T_gen + T_learn) / 2)`` completions/s (tokens/s: times sync's
  mean length): the step's total work spread perfectly over two cores. Pipelining can only
  hide the cheaper role behind the dearer one, so its own ceiling is ``P·G / max(T_gen,
  T_learn)``; the two are equal when the roles are balanced, and the bound is out of reach
  for ``pipeline-rl`` when they are not (by ``(T_gen + T_learn) / (2·max(T_gen, T_learn))``).
  It also assumes two free cores: read it against the machine's parallel scaling, printed at
  the start and at the end of the run.
- **pipe/bound**, **pipe/TRL**, **pipe/sync**: pipeline-rl's completions/s over the 2-core bound,
  over the best TRL run, over sync.
- **MFU sync / pipe**: the learner's ``learner_mfu`` (6·N·trained tokens / busy seconds / the
  matmul peak its own process measured at start), mean over the timed window.
- **MFU 1-core sync / pipe**: the same FLOP/s (``learner_flop_s``) over the single-core
  (1 thread) matmul peak measured once at the top (``scalerl.compute.matmul_peak``): one
  denominator for every row.

Cost (2 vCPUs): the full grid at ``--steps 1 --warmup 1`` took 10.1 min on a busy machine
(load ≈ 3, parallel scaling 0.8x), about 4.5 min of it fixed (20 process starts, evaluations,
the two scaling probes) and about 136 s per optimiser step of all 20 variants together, half
of that in ``16x8@256``. The defaults (``--steps 8 --warmup 2``, one round: 8 timed steps, a
multiple of k) extrapolate to ≈ 28 min at that load and ≈ 12–15 min on a quiet machine (per-step
times scaled by the quiet/busy ratios of ``vs_trl.py``'s 2x8@128 runs); ``--repeats 2`` nearly
doubles it.

Usage: python bench/throughput.py [--shapes 2x8@128,8x8@64,8x16@128,16x8@256,micro:8x8@128]
       [--steps 8] [--warmup 2] [--k 4] [--trl-threads 1 2] [--repeats 1] [--no-trl]
       [--markdown PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import re
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames, not ours
sys.path.insert(0, str(Path(__file__).parent))
from _workload import Measured, Workload, parallel_scaling, run_scalerl, save_base_model  # noqa: E402
from vs_trl import run_trl  # noqa: E402  (sets HF_HUB_OFFLINE: both sides load a local dir)

DEFAULT_SHAPES = "2x8@128,8x8@64,8x16@128,16x8@256,micro:8x8@128"
_SHAPE = re.compile(r"^(?:(?P<preset>[a-z0-9_]+):)?(?P<p>\d+)x(?P<g>\d+)@(?P<l>\d+)$")


def parse_shape(text: str, default_preset: str = "nano") -> Workload:
    """``[preset:]PxG@L`` -> the workload (``micro:8x8@128``: the micro preset, 8 prompts x 8
    completions, at most 128 new tokens)."""
    match = _SHAPE.match(text.strip())
    if match is None:
        raise ValueError(f"shape {text!r} is not [preset:]PxG@L (e.g. 2x8@128 or micro:8x8@128)")
    p, g, length = (int(match[k]) for k in ("p", "g", "l"))
    if min(p, g, length) < 1:
        raise ValueError(f"shape {text!r}: P, G and L must be at least 1")
    return Workload(match["preset"] or default_preset, p, g, length)


def shape_name(work: Workload) -> str:
    return f"{work.preset} {work.prompts}x{work.generations}@{work.max_new_tokens}"


def two_core_bound(completions_per_step: int, t_gen: float, t_learn: float) -> float:
    """Completions/s if one step's work, ``t_gen + t_learn`` seconds on one core, were spread
    perfectly over two cores: ``P·G / ((t_gen + t_learn) / 2)`` (issue 10's bound)."""
    return completions_per_step / ((t_gen + t_learn) / 2.0)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing."""
    return None if a is None or b is None or b == 0 else a / b


@dataclass(frozen=True)
class Row:
    """One shape's results and the columns derived from them."""

    work: Workload
    sync: Measured
    pipeline: Measured
    peak_1core: float
    """Single-thread matmul FLOP/s measured once at the top."""
    trl: Measured | None = None
    trl_threads: int | None = None

    @property
    def t_gen(self) -> float:
        return self.sync.learner_wait_s

    @property
    def t_learn(self) -> float:
        return self.sync.learner_busy_s

    @property
    def bound(self) -> float:
        """The 2-core bound in completions/s."""
        return two_core_bound(self.work.completions_per_step, self.t_gen, self.t_learn)

    @property
    def bound_tokens(self) -> float:
        """The 2-core bound in tokens/s, at sync's mean completion length."""
        return self.bound * self.sync.mean_len

    @property
    def pipe_over_bound(self) -> float:
        return self.pipeline.completions_per_s / self.bound

    @property
    def pipe_over_sync(self) -> float:
        return self.pipeline.completions_per_s / self.sync.completions_per_s

    @property
    def pipe_over_trl(self) -> float | None:
        return ratio(self.pipeline.completions_per_s, self.trl and self.trl.completions_per_s)

    def mfu_1core(self, m: Measured) -> float:
        """The learner's FLOP/s over the single-core matmul peak."""
        return m.learner_flop_s / self.peak_1core


HEADER = ["shape", "len T/s/p", "TRL best c/s / tok/s", "sync c/s / tok/s", "pipeline-rl c/s / tok/s",
          "T_gen / T_learn (s)", "2-core bound c/s / tok/s", "pipe/bound", "pipe/TRL", "pipe/sync",
          "MFU sync / pipe", "MFU 1-core sync / pipe"]


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _rate(m: Measured | None) -> str:
    return "-" if m is None else f"{m.completions_per_s:.1f} / {m.tokens_per_s:.0f}"


def cells(row: Row) -> list[str]:
    """The table cells of one row, in ``HEADER``'s order."""
    trl_len = "-" if row.trl is None else f"{row.trl.mean_len:.0f}"
    trl = _rate(row.trl) + ("" if row.trl is None else f" ({row.trl_threads} thr)")
    return [
        shape_name(row.work),
        f"{trl_len}/{row.sync.mean_len:.0f}/{row.pipeline.mean_len:.0f}",
        trl,
        _rate(row.sync),
        _rate(row.pipeline),
        f"{row.t_gen:.3f} / {row.t_learn:.3f}",
        f"{row.bound:.1f} / {row.bound_tokens:.0f}",
        f"{row.pipe_over_bound:.0%}",
        _x(row.pipe_over_trl),
        _x(row.pipe_over_sync),
        f"{row.sync.learner_mfu:.0%} / {row.pipeline.learner_mfu:.0%}",
        f"{row.mfu_1core(row.sync):.0%} / {row.mfu_1core(row.pipeline):.0%}",
    ]


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def text_table(rows: list[Row]) -> str:
    table = [HEADER] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table)


def in_fresh_process(fn, /, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a newly spawned process (not a daemon: the ``local`` backend
    starts its generator processes from it); its exception, if any, is raised here."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _line(shape: str, name: str, round_: int, m: Measured) -> str:
    text = (f"  {shape:14s} {name:23s} #{round_ + 1} {m.completions_per_s:8.1f} completions/s {m.tokens_per_s:8.0f} tok/s  "
            f"mean len {m.mean_len:5.1f}  ({m.seconds:.1f} s for {m.steps} steps)")
    if m.learner_busy_s is not None:
        text += (f"  learner busy {m.learner_busy_s:.3f} s / waits {m.learner_wait_s:.3f} s per step, "
                 f"MFU {m.learner_mfu:.0%}")
    return text


def run_shape(work: Workload, model_dir: Path, tmp: Path, args, peak_1core: float) -> Row:
    """Every variant of one shape, ``args.repeats`` interleaved rounds, each in a fresh process."""
    def fresh(prefix: str) -> Path:  # a new directory per run, repeats included
        return Path(tempfile.mkdtemp(prefix=prefix, dir=tmp))

    timing = {"warmup": args.warmup, "steps": args.steps}
    runs = {} if args.no_trl else {
        f"TRL GRPOTrainer ({t} thr)": (t, lambda t=t: in_fresh_process(
            run_trl, work, model_dir, fresh("trl-"), threads=t, **timing))
        for t in args.trl_threads
    }
    runs["scalerl sync"] = (None, lambda: in_fresh_process(
        run_scalerl, work, model_dir, fresh("sync-"), **timing, **{"pipeline.mode": "sync"}))
    runs[f"scalerl pipeline-rl-{args.k}"] = (None, lambda: in_fresh_process(
        run_scalerl, work, model_dir, fresh("pipeline-"), **timing,
        **{"pipeline.mode": "pipeline-rl", "pipeline.k": args.k}))
    best: dict[str, Measured] = {}
    for round_ in range(args.repeats):
        for name, (_, run) in runs.items():
            m = run()
            if name not in best or m.completions_per_s > best[name].completions_per_s:
                best[name] = m
            print(_line(shape_name(work), name, round_, m), flush=True)
    trl_names = [n for n in best if n.startswith("TRL")]
    trl_name = max(trl_names, key=lambda n: best[n].completions_per_s) if trl_names else None
    return Row(work, best["scalerl sync"], best[f"scalerl pipeline-rl-{args.k}"], peak_1core,
               trl=best.get(trl_name), trl_threads=runs[trl_name][0] if trl_name else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES,
                    help="comma-separated [preset:]PxG@L (preset defaults to nano); default: the full grid")
    ap.add_argument("--steps", type=int, default=8, help="timed optimiser steps per variant")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (>= 1)")
    ap.add_argument("--k", type=int, default=4, help="PipelineRL lag bound")
    ap.add_argument("--trl-threads", type=int, nargs="+", default=[1, 2],
                    help="torch threads of the TRL process; one TRL run per value, the best is the row's TRL")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds over a shape's variants (interleaved); each variant's best is kept")
    ap.add_argument("--no-trl", action="store_true", help="skip TRL (machines without the bench extra)")
    ap.add_argument("--markdown", type=Path, metavar="PATH", help="also write the table as Markdown to PATH")
    args = ap.parse_args()
    if args.warmup < 1:
        ap.error("--warmup must be at least 1 (the first step pays one-off start-up costs)")
    if args.steps < 1 or args.repeats < 1:
        ap.error("--steps and --repeats must be at least 1")
    try:
        shapes = [parse_shape(s) for s in args.shapes.split(",") if s.strip()]
    except ValueError as err:
        ap.error(str(err))
    if not args.no_trl and importlib.util.find_spec("trl") is None:
        ap.error("TRL is not installed: install the bench extra "
                 "(pip install -c constraints.txt -e '.[train,bench]') or pass --no-trl")

    import torch

    from scalerl.compute import matmul_peak

    started = time.perf_counter()
    torch.set_num_threads(1)
    peak_1core = matmul_peak("cpu")
    header = [
        f"workload: addition task, {args.steps} timed steps after {args.warmup}, pipeline-rl k={args.k}, "
        f"best of {args.repeats} round(s), each variant in a fresh process; {os.cpu_count()} CPUs",
        f"single-core (1 thread) matmul peak: {peak_1core / 1e9:.1f} GFLOP/s",
        f"machine parallel scaling at the start (2 single-thread processes vs 1): {parallel_scaling():.2f}x",
    ]
    print("\n".join(header), flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="scalerl-throughput-") as tmp:
        model_dirs: dict[str, Path] = {}
        for work in shapes:
            if work.preset not in model_dirs:
                model_dirs[work.preset] = save_base_model(work.preset, Path(tmp) / f"base-{work.preset}")
            rows.append(run_shape(work, model_dirs[work.preset], Path(tmp), args, peak_1core))
    footer = [
        f"machine parallel scaling at the end: {parallel_scaling():.2f}x",
        f"{len(shapes)} shape(s) in {(time.perf_counter() - started) / 60:.1f} min; ratios in completions/s",
    ]
    print(text_table(rows))
    print("\n".join(footer))
    if args.markdown:
        args.markdown.write_text("\n\n".join(["\n".join(header), markdown_table(rows), "\n".join(footer)]) + "\n")
        print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
