"""Generation throughput: scalerl's TorchEngine vs transformers ``model.generate``, one run.

Same model, same prompts, same number of new tokens per sequence (EOS ignored on our side,
``min_new_tokens = max_new_tokens`` on theirs), same sampling (temperature 1, top-p 1, no
top-k). Reported side by side, as tokens/s and ratios against ``model.generate``:
- ``engine (fast)``: the default engine, lean decode step (``rollout/fast_decode.py``);
- ``engine (plain)``: every step through ``models.forward.forward_logits`` + DynamicCache;
- FP32-head cost: engine on a bf16 body with the head in fp32 vs in bf16 (digest §2.4).

Runs are interleaved and each figure is the median of ``--repeats`` timed runs after one
warm-up; time is this process's CPU time (``time.process_time``) with a fixed number of
torch threads, which damps (but does not remove) the noise of other jobs on a shared machine.

    .venv/bin/python bench/generation.py --preset micro --batch 16 --new-tokens 64
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="micro", help="scalerl.models preset (nano, micro, small, base)")
    parser.add_argument("--batch", type=int, default=16, help="sequences per generate call")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer = build_task_tokenizer()
    model = build_model(args.preset, len(tokenizer), tokenizer=tokenizer)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, len(tokenizer), (args.batch, args.prompt_len), generator=gen)
    tokens = args.batch * args.new_tokens

    fast = TorchEngine(model, tokenizer, eos_token_ids=())
    plain = TorchEngine(model, tokenizer, eos_token_ids=(), fast=False)
    secs = measure(
        {
            "transformers generate": _hf_generate(model, prompts, args.new_tokens),
            "engine (fast)": _engine_generate(fast, prompts, args.new_tokens),
            "engine (plain)": _engine_generate(plain, prompts, args.new_tokens),
        },
        args.repeats,
    )
    print(f"preset={args.preset} batch={args.batch} prompt={args.prompt_len} new={args.new_tokens} "
          f"threads={args.threads} (fp32 model, median of {args.repeats})")
    base = secs["transformers generate"]
    for name, s in secs.items():
        print(f"  {name:24s} {tokens / s:9.0f} tok/s   x{base / s:5.2f} vs generate")

    body16 = build_model(args.preset, len(tokenizer), tokenizer=tokenizer, dtype=torch.bfloat16)
    head = measure(
        {
            "bf16 body, fp32 head": _engine_generate(TorchEngine(body16, tokenizer, eos_token_ids=()), prompts, args.new_tokens),
            "bf16 body, bf16 head": _engine_generate(
                TorchEngine(body16, tokenizer, eos_token_ids=(), fp32_head=False), prompts, args.new_tokens
            ),
        },
        args.repeats,
    )
    for name, s in head.items():
        print(f"  {name:24s} {tokens / s:9.0f} tok/s")
    ratio = head["bf16 body, fp32 head"] / head["bf16 body, bf16 head"]
    print(f"  FP32-head cost: time(fp32 head) / time(bf16 head) = {ratio:.3f}")


if __name__ == "__main__":
    main()
