"""Training–inference mismatch by precision: mismatch_kl and IS-ratio statistics, one run.

For each precision the same prompts are decoded by ``TorchEngine`` (KV cache, lean decode
step) and rescored by the trainer's full-sequence forward (``models.forward.forward_logits``),
from the same weights: every gap is numerics. Rows:

- ``fp32``: float32 body and head (the floor: kernel and cache order only);
- ``bf16``: bfloat16 body, head in bfloat16;
- ``bf16+fp32head``: bfloat16 body, LM head and softmax in float32 on both sides (§2.4);
- ``fp16`` and ``fp16+fp32head``: float16 body, only where a CUDA device is present.

Columns are ``mismatch_kl`` (k3 estimate of KL(gen ‖ train) per token), max and mean
``|Δ log p|``, the share of tokens with ρ outside [0.5, 2], and the ratio of each row's
``mismatch_kl`` to ``bf16``'s. A random-init model has near-uniform logits, where head
rounding hardly shows; ``--head-scale`` (default 10) multiplies the head weights to give the
peaked logits of a trained model, and ``--model DIR`` loads a real one instead.

    .venv/bin/python bench/mismatch.py --preset micro --prompts 32 --new-tokens 48
"""

from __future__ import annotations

import argparse

import torch
from _workload import parallel_scaling  # bench/ is on the path when run as a script

from scalerl.algo.logprobs import token_logprobs
from scalerl.algo.mismatch import mismatch_metrics, mismatch_sums
from scalerl.models import build_model, build_task_tokenizer, load_pretrained
from scalerl.models.forward import forward_logits
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import SamplingParams

ROWS = [("fp32", torch.float32, True), ("bf16", torch.bfloat16, False), ("bf16+fp32head", torch.bfloat16, True),
        ("fp16", torch.float16, False), ("fp16+fp32head", torch.float16, True)]


def _model(args, dtype: torch.dtype, device: str):
    if args.model:
        model, tokenizer = load_pretrained(args.model, "float32")
        model = model.to(dtype)
    else:
        tokenizer = build_task_tokenizer()
        model = build_model(args.preset, len(tokenizer), seed=args.seed, tokenizer=tokenizer, dtype=dtype)
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(args.head_scale)
    return model.to(device).eval(), tokenizer


def measure(args, dtype: torch.dtype, fp32_head: bool, device: str) -> dict[str, float]:
    """Mismatch statistics of one precision on ``args.prompts`` decoded completions."""
    model, tokenizer = _model(args, dtype, device)
    engine = TorchEngine(model, tokenizer, fp32_head=fp32_head, device=device, seed=args.seed)
    prompts = [tokenizer.encode(f"add {i}+{3 * i + 7} =") for i in range(args.prompts)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=args.new_tokens, seed=1))
    parts = []
    with torch.no_grad():
        for c in outs:
            ids = torch.tensor([list(c.prompt_tokens) + list(c.tokens)], device=device)
            logits, _ = forward_logits(model, ids, fp32_head=fp32_head)
            start = len(c.prompt_tokens) - 1
            tokens = torch.tensor([list(c.tokens)], device=device)
            logp = token_logprobs(logits[:, start:-1], tokens, 1.0)  # (1, T)
            gen = torch.from_numpy(c.logprobs)[None].to(device)
            parts.append(mismatch_sums(logp, gen, torch.ones_like(logp, dtype=torch.bool)))
    return mismatch_metrics(parts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="micro")
    p.add_argument("--model", help="an HF model directory to load instead of a random preset")
    p.add_argument("--head-scale", type=float, default=10.0)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-scaling", action="store_true", help="skip the parallel-scaling probes (smoke tests)")
    args = p.parse_args()
    if not args.no_scaling:
        print(f"machine parallel scaling at the start (2 single-thread processes vs 1): {parallel_scaling():.2f}x")
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = [(n, d, h) for n, d, h in ROWS if d != torch.float16 or device == "cuda"]
    source = args.model or f"random {args.preset}, head x{args.head_scale:g}"
    print(f"# mismatch between TorchEngine decode and the trainer's forward ({source}; {device}; "
          f"{args.prompts} prompts x {args.new_tokens} tokens)")
    results = {name: measure(args, dtype, head, device) for name, dtype, head in rows}
    base = results["bf16"]["mismatch_kl"]
    print(f"{'precision':<15} {'mismatch_kl':>12} {'max|dlogp|':>11} {'mean|dlogp|':>12} "
          f"{'out[0.5,2]':>11} {'kl / bf16':>10}")
    for name, m in results.items():
        rel = m["mismatch_kl"] / base if base > 0 else float("nan")
        print(f"{name:<15} {m['mismatch_kl']:>12.3e} {m['mismatch_logp_abs_max']:>11.3e} "
              f"{m['mismatch_logp_abs_mean']:>12.3e} {m['mismatch_ratio_out_frac']:>11.4f} {rel:>10.3f}")
    if device == "cpu":
        print("fp16 rows need a CUDA device (fp16 training needs CUDA loss scaling); not run here.")
    if not args.no_scaling:
        print(f"machine parallel scaling at the end: {parallel_scaling():.2f}x")


if __name__ == "__main__":
    main()
