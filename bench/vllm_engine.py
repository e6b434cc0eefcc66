"""TorchEngine vs the real vLLM (its CPU build, 0.32.0), side by side in one run.

Same model directory (a nano or micro preset built here, float32, FP32 head on both), same
prompts, same number of new tokens per sequence (EOS never ends a row: ``min_tokens`` on vLLM's
side, ``eos_token_ids=()`` on ours), temperature 1, top-p 1. For each batch size: new tokens/s
of each engine (median of ``--repeats`` timed runs after one warm-up, wall time: vLLM spends
its time in its own kernels and threads) and their ratio; then the time to load one full set
of weights into each (``update_weights``: TorchEngine's ``load_state_dict`` in place, vLLM's
``reload_weights`` over ``collective_rpc``), per MB of weights. Both engines use one torch
thread (vLLM's CPU worker sets one for serving), so the parallel scaling printed beside the
figures says what the machine had to give.

    .venv/bin/python bench/vllm_engine.py --preset nano --batch 4 16 64 --new-tokens 64
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from scalerl.models import build_model, build_task_tokenizer, load_pretrained, save_pretrained
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.rollout.vllm_engine import VLLMEngine
from scalerl.types import SamplingParams

sys.path.insert(0, str(Path(__file__).parent))
from _workload import median_seconds, parallel_scaling  # noqa: E402


def _median_wall(fn, repeats: int) -> float:
    return median_seconds(fn, repeats, warmup=True)


def _vllm_decode(engine: VLLMEngine, prompts, new_tokens: int):
    """All rows to exactly ``new_tokens``, through vLLM's own batched ``generate``."""
    import vllm

    params = vllm.SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, temperature=1.0, top_p=1.0,
                                 logprobs=0, ignore_eos=True, seed=0)
    return lambda: engine.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="nano")
    ap.add_argument("--batch", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"machine parallel scaling at the start (2 single-thread processes vs 1): {parallel_scaling():.2f}x")
    torch.set_num_threads(1)
    tokenizer = build_task_tokenizer()
    model = build_model(args.preset, len(tokenizer), seed=0, tokenizer=tokenizer)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_pretrained(model, tokenizer, Path(tmp) / "model")
        vllm_engine = VLLMEngine(str(model_dir), dtype="float32", fp32_head=True, enforce_eager=True,
                                 max_model_len=args.prompt_len + args.new_tokens + 8, kv_cache_memory_bytes=256 << 20)
        torch.set_num_threads(1)
        ours, _ = load_pretrained(str(model_dir))
        torch_engine = TorchEngine(ours, tokenizer, fp32_head=True, eos_token_ids=())
        gen = torch.Generator().manual_seed(0)
        params = SamplingParams(max_new_tokens=args.new_tokens, seed=0)
        print(f"preset {args.preset}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
              f"prompt {args.prompt_len} + {args.new_tokens} new tokens")
        print(f"{'batch':>5} {'torch tok/s':>12} {'vllm tok/s':>11} {'torch/vllm':>10}")
        for batch in args.batch:
            prompts = torch.randint(5, len(tokenizer), (batch, args.prompt_len), generator=gen).tolist()
            t_torch = _median_wall(lambda p=prompts: torch_engine.generate(p, params), args.repeats)
            t_vllm = _median_wall(_vllm_decode(vllm_engine, prompts, args.new_tokens), args.repeats)
            tokens = batch * args.new_tokens
            print(f"{batch:>5} {tokens / t_torch:>12.0f} {tokens / t_vllm:>11.0f} {t_vllm / t_torch:>10.2f}")
        state = dict(model.named_parameters())
        mb = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
        load_torch = _median_wall(lambda: torch_engine.update_weights(state, 1), args.repeats)
        load_vllm = _median_wall(lambda: vllm_engine.update_weights(state, 1), args.repeats)
        print(f"weight load ({mb:.1f} MB): torch {1e3 * load_torch / mb:.2f} ms/MB, vllm {1e3 * load_vllm / mb:.2f} "
              f"ms/MB, vllm/torch {load_vllm / load_torch:.1f}x")
    print(f"machine parallel scaling at the end: {parallel_scaling():.2f}x")


if __name__ == "__main__":
    main()
