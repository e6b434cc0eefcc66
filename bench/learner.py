"""Learner step cost: the plain forward vs the shared-prompt path, by micro-batch shape, one run.

One fixed batch of real rollouts (P prompts × G completions of a random-init model, EOS
ending some early, so lengths spread out), trained on by ``backward_and_step`` with a zero
learning rate (the weights, and so every variant's work, stay the same). Variants:

- ``plain``: every row forwards prompt + completion, ``optim.micro_batch`` rows at a time;
- ``shared``: each distinct prompt once per micro-batch (``pipeline.learner.packing``), rows ordered
  to share prompts or bucket lengths, micro-batches of ``micro_batch`` rows;
- ``shared+budget``: the same, micro-batches also capped at ``optim.micro_batch_tokens``
  forwarded positions (the default).

Time is this process's CPU time with one torch thread, the median of ``--repeats`` after a
warm-up, variants interleaved. Also printed: real tokens forwarded, slots (padding included),
and MFU against a single-thread matmul peak measured here.

With ``--lora RANK`` (16 by default in ``make bench``) it instead compares full fine-tuning
with LoRA of that rank (``model.lora``) on ``--lora-preset`` (``base``: the adapters' share
of the weights shrinks with width, so the tiny presets understate it), same batch, AdamW
at a real learning rate on both: trained tokens per CPU second, and the bytes one weight
sync publishes (what ``pipeline.weights`` flattens: every weight, or the adapters alone).

Usage: python bench/learner.py [--preset nano] [--prompts 8] [--generations 8]
       [--max-new-tokens 128 48] [--micro-batch 64] [--tokens 2048] [--repeats 5]
       python bench/learner.py --lora 16 [--lora-preset base] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from scalerl.compute import matmul_peak
from scalerl.config import load_config
from scalerl.data.tasks import get_task
from scalerl.models import build_model, build_task_tokenizer, count_parameters
from scalerl.pipeline import build
from scalerl.pipeline.learner.batch import prepare_batch
from scalerl.pipeline.learner.train_step import backward_and_step
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import Group, SamplingParams


def rollouts(model, tok, prompts: int, generations: int, max_new: int) -> list[Group]:
    task = get_task("addition")
    ids = [tok.encode(task.prompt(task.train_example(i))) for i in range(prompts)]
    engine = TorchEngine(model, tok, fp32_head=True, seed=0)
    outs = engine.generate([p for p in ids for _ in range(generations)],
                           SamplingParams(max_new_tokens=max_new, seed=1))
    rewards = np.where(np.arange(generations) % 2 == 0, 1.0, -1.0).astype(np.float32)  # every group trains
    return [Group(p, outs[generations * p: generations * (p + 1)], rewards, seq=p) for p in range(prompts)]


def step_runner(model, tok, groups, overrides: list[str]):
    cfg = load_config("scalerl", ["length.truncation=keep", "filters.zero_variance=false", *overrides])
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    batch = prepare_batch(groups, build.batch_rules(cfg), 0, tok.pad_token_id)
    out = {}

    def run():
        out.update(backward_and_step(model, opt, sched, batch, build.step_rules(cfg), tok.pad_token_id))
    return run, out


def lora_vs_full(args) -> None:
    """Full fine-tuning against LoRA of rank ``args.lora``, side by side, one batch."""
    from scalerl.models.lora import LoraSpec, apply_lora
    from scalerl.pipeline.weights import WeightLayout

    tok = build_task_tokenizer()
    max_new = args.max_new_tokens[0]
    full = build_model(args.lora_preset, len(tok), seed=0, tokenizer=tok)
    groups = rollouts(full, tok, args.prompts, args.generations, max_new)
    lora = apply_lora(build_model(args.lora_preset, len(tok), seed=0, tokenizer=tok),
                      LoraSpec(args.lora, 2.0 * args.lora, 0.0, ("q_proj", "k_proj", "v_proj", "o_proj",
                                                                  "gate_proj", "up_proj", "down_proj")))
    cfg = load_config("scalerl", ["length.truncation=keep", "filters.zero_variance=false",
                                  f"optim.micro_batch={args.micro_batch}"])
    runs = {}
    for name, model in (("full", full), ("lora", lora)):
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        batch = prepare_batch(groups, build.batch_rules(cfg), 0, tok.pad_token_id)
        runs[name] = (model, opt, sched, batch, {})
    times = {name: [] for name in runs}
    for repeat in range(args.repeats + 1):  # the first is a warm-up
        for name, (model, opt, sched, batch, out) in runs.items():
            start = time.process_time()
            out.update(backward_and_step(model, opt, sched, batch, build.step_rules(cfg), tok.pad_token_id))
            if repeat:
                times[name].append(time.process_time() - start)
    n_params = count_parameters(full)
    print(f"\nLoRA rank {args.lora} vs full fine-tuning: {args.lora_preset} ({n_params / 1e6:.1f}M params), "
          f"P x G = {args.prompts} x {args.generations}, L <= {max_new}, AdamW, 1 thread, median of {args.repeats}")
    rate, sent = {}, {}
    for name, (model, _, _, _, out) in runs.items():
        secs = statistics.median(times[name])
        rate[name] = out["step_trained_tokens"] / secs
        sent[name] = WeightLayout(model).size * 4  # float32 on the wire
        print(f"  {name:5s} {secs * 1e3:7.0f} ms/step  {rate[name]:8.0f} trained tokens/s  "
              f"{sent[name] / 2**20:8.2f} MiB per published version")
    print(f"  LoRA/full tokens/s {rate['lora'] / rate['full']:.2f}x (goal >= 1.2x); "
          f"full/LoRA bytes per version {sent['full'] / sent['lora']:.1f}x (goal >= 20x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="nano")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, nargs="+", default=[128, 48])
    ap.add_argument("--micro-batch", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=2048, help="optim.micro_batch_tokens of shared+budget")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lora", type=int, default=None, metavar="RANK", help="compare LoRA of this rank with full")
    ap.add_argument("--lora-preset", default="base")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.lora is not None:
        from _workload import parallel_scaling

        print(f"machine parallel scaling at the start (2 single-thread processes vs 1): {parallel_scaling():.2f}x")
        lora_vs_full(args)
        print(f"machine parallel scaling at the end: {parallel_scaling():.2f}x")
        return
    tok = build_task_tokenizer()
    model = build_model(args.preset, len(tok), seed=0, tokenizer=tok)
    peak = matmul_peak()
    n_params = count_parameters(model)
    print(f"{args.preset} ({n_params / 1e6:.2f}M params), P x G = {args.prompts} x {args.generations}, 1 thread, "
          f"single-thread matmul peak {peak / 1e9:.1f} GFLOP/s; CPU seconds, median of {args.repeats}")
    mb = args.micro_batch
    variants = {"plain": [f"optim.micro_batch={mb}", "optim.shared_prompt=false"],
                "shared": [f"optim.micro_batch={mb}", "optim.micro_batch_tokens=null"],
                "shared+budget": [f"optim.micro_batch={mb}", f"optim.micro_batch_tokens={args.tokens}"]}
    for max_new in args.max_new_tokens:
        groups = rollouts(model, tok, args.prompts, args.generations, max_new)
        lens = [c.num_tokens for g in groups for c in g.completions]
        runs = {name: step_runner(model, tok, groups, o) for name, o in variants.items()}
        for run, _ in runs.values():
            run()  # warm-up
        times = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, (run, _) in runs.items():
                start = time.process_time()
                run()
                times[name].append(time.process_time() - start)
        secs = {name: statistics.median(ts) for name, ts in times.items()}
        print(f"\nL <= {max_new}: completion lengths {min(lens)}-{max(lens)}, mean {np.mean(lens):.1f}")
        for name, (_, m) in runs.items():
            mfu = 6 * n_params * m["step_trained_tokens"] / secs[name] / peak
            print(f"  {name:14s} {secs[name] * 1e3:7.0f} ms  real {m['step_trained_tokens']:6d}  slots {m['step_padded_tokens']:6d}  "
                  f"MFU {mfu:5.1%}  plain/this {secs['plain'] / secs[name]:.2f}x")


if __name__ == "__main__":
    main()
