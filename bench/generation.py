"""Generation throughput: scalerl's TorchEngine vs transformers ``model.generate``, one run.

Same model, same prompts, same number of new tokens per sequence (EOS ignored on our side,
``min_new_tokens = max_new_tokens`` on theirs), same sampling (temperature 1, top-p 1, no
top-k). For each batch size, side by side: tokens/s and ratios against ``model.generate`` of
- ``fast``: the default engine, lean decode step (``rollout/fast_decode.py``);
- ``plain``: every step through ``models.forward.forward_logits`` + DynamicCache;
- ``fp32head``: time of engine calls on a bf16 body with the head in fp32 over bf16 (§2.4);
then the head alone at realistic vocabularies (the task vocabulary is tiny).

``--profile`` adds, per batch size, where the fast path's CPU time goes (torch profiler):
the share in the matrix products (``mm``/``addmm`` for the linear layers, ``bmm`` for
attention) that ``generate`` must compute too, and the ratio to ``generate`` the engine
would reach if every other cost vanished (``fast/gen ÷ matmul share``): the bound on what
more engine work can give at that batch.

Runs are interleaved and each figure is the median of ``--repeats`` timed runs after one
warm-up; time is this process's CPU time (``time.process_time``) with a fixed number of
torch threads, which damps (but does not remove) the noise of other jobs on a shared machine.

    .venv/bin/python bench/generation.py --preset nano --batch 4 16 64 --new-tokens 64
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from scalerl.algo.logprobs import lm_head_logits
from scalerl.models import build_model, build_task_tokenizer
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import SamplingParams


def _timed(fn) -> float:
    # CPU time of this process: on a machine shared with other jobs wall time mostly
    # measures the neighbours. Valid because every variant runs on the same, fixed threads.
    start = time.process_time()
    fn()
    return time.process_time() - start


def _hf_generate(model, prompts: torch.Tensor, new_tokens: int):
    def run():
        with torch.no_grad():
            out = model.generate(
                prompts,
                attention_mask=torch.ones_like(prompts),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=0,
            )
        assert out.shape[1] == prompts.shape[1] + new_tokens

    return run


def _engine_generate(engine: TorchEngine, prompts: torch.Tensor, new_tokens: int):
    rows = prompts.tolist()

    def run():
        out = engine.generate(rows, SamplingParams(max_new_tokens=new_tokens, seed=0))
        assert all(c.num_tokens == new_tokens for c in out)

    return run


def measure(runners: dict, repeats: int) -> dict[str, float]:
    """Median seconds per runner; runs interleaved so drifts in machine load hit all alike."""
    for run in runners.values():
        run()  # warm-up
    times = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            times[name].append(_timed(run))
    return {name: statistics.median(ts) for name, ts in times.items()}


def compare_engines(model, tokenizer, prompts: torch.Tensor, new_tokens: int, repeats: int) -> dict[str, float]:
    """Seconds per call of ``model.generate`` and of the engine's fast and plain paths."""
    fast = TorchEngine(model, tokenizer, eos_token_ids=())
    plain = TorchEngine(model, tokenizer, eos_token_ids=(), fast=False)
    return measure(
        {
            "generate": _hf_generate(model, prompts, new_tokens),
            "fast": _engine_generate(fast, prompts, new_tokens),
            "plain": _engine_generate(plain, prompts, new_tokens),
        },
        repeats,
    )


def head_cost(body16, tokenizer, prompts: torch.Tensor, new_tokens: int, repeats: int) -> float:
    """time(fp32 head) / time(bf16 head) of whole engine calls on a bf16 body."""
    secs = measure(
        {
            fp32: _engine_generate(TorchEngine(body16, tokenizer, eos_token_ids=(), fp32_head=fp32), prompts, new_tokens)
            for fp32 in (True, False)
        },
        repeats,
    )
    return secs[True] / secs[False]


def head_only_cost(batch: int, hidden: int, vocab: int, repeats: int = 20) -> tuple[float, float]:
    """The head alone at a realistic vocabulary, one decode step, bf16 hidden states:
    time of the FP32 head over the bf16 head, (a) with the float32 copy of the weight cached
    as the engine does, (b) casting the bf16 weight at every call."""
    h = torch.randn(batch, hidden, dtype=torch.bfloat16)
    w = torch.randn(vocab, hidden, dtype=torch.bfloat16)
    w32 = w.float()
    secs = measure(
        {
            "cached": lambda: lm_head_logits(h, w32, fp32=True),
            "cast": lambda: lm_head_logits(h, w, fp32=True),
            "bf16": lambda: lm_head_logits(h, w, fp32=False),
        },
        repeats,
    )
    return secs["cached"] / secs["bf16"], secs["cast"] / secs["bf16"]


def matmul_share(model, tokenizer, prompts: torch.Tensor, new_tokens: int) -> dict[str, float]:
    """Shares of the fast path's self CPU time in linear-layer and attention matmuls."""
    from torch.profiler import ProfilerActivity, profile

    run = _engine_generate(TorchEngine(model, tokenizer, eos_token_ids=()), prompts, new_tokens)
    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    times = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    total = sum(times.values())
    return {"linear": (times.get("aten::mm", 0) + times.get("aten::addmm", 0)) / total,
            "attention": times.get("aten::bmm", 0) / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="nano", help="scalerl.models preset (nano, micro, small, base)")
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 16, 64], help="sequences per generate call")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="also print the fast path's matmul share")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer = build_task_tokenizer()
    model = build_model(args.preset, len(tokenizer), tokenizer=tokenizer)
    body16 = build_model(args.preset, len(tokenizer), tokenizer=tokenizer, dtype=torch.bfloat16)
    print(f"preset={args.preset} vocab={len(tokenizer)} prompt={args.prompt_len} new={args.new_tokens} "
          f"threads={args.threads}; CPU seconds, median of {args.repeats}; tok/s of new tokens")
    print(f"{'batch':>5} {'generate':>9} {'fast':>9} {'plain':>9} {'fast/gen':>9} {'plain/gen':>9} {'fp32head':>9}")
    for batch in args.batch:
        gen = torch.Generator().manual_seed(batch)
        prompts = torch.randint(3, len(tokenizer), (batch, args.prompt_len), generator=gen)
        secs = compare_engines(model, tokenizer, prompts, args.new_tokens, args.repeats)
        tps = {name: batch * args.new_tokens / s for name, s in secs.items()}
        cost = head_cost(body16, tokenizer, prompts, args.new_tokens, args.repeats)
        print(f"{batch:5d} {tps['generate']:9.0f} {tps['fast']:9.0f} {tps['plain']:9.0f} "
              f"{tps['fast'] / tps['generate']:9.2f} {tps['plain'] / tps['generate']:9.2f} {cost:9.3f}")
        if args.profile:
            share = matmul_share(model, tokenizer, prompts, args.new_tokens)
            ratio = tps["fast"] / tps["generate"]
            print(f"      fast path: {share['linear']:.0%} linear-layer matmuls + {share['attention']:.0%} attention "
                  f"matmuls; with every other cost gone: {ratio / (share['linear'] + share['attention']):.2f}x generate")
    hidden = model.config.hidden_size
    for vocab in (32768, 151936):
        cached, cast = head_only_cost(max(args.batch), hidden, vocab)
        print(f"head alone, B={max(args.batch)} H={hidden} V={vocab}: time(fp32 head)/time(bf16 head) = "
              f"{cached:.2f} (fp32 weight cached, as the engine) | {cast:.2f} (cast every call)")


if __name__ == "__main__":
    main()
