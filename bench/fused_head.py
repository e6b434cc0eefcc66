"""The FP32 LM head whole vs in chunks (``optim.head_chunk_tokens``): peak memory and time of one
forward + backward at Qwen2.5-0.5B's head (H = 896, V = 151,936), side by side in one run.

Each variant runs in its own fresh process (so one's freed pages cannot lower the other's peak),
interleaved ``--repeats`` times; the peak is the process's maximum resident set above what it held
once its inputs were made (``ru_maxrss``), the time the best of the repeats. The last line is the
ratio: the whole head's peak over the chunked one's.

    .venv/bin/python bench/fused_head.py [--tokens 2048] [--chunk 1024] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

H, V = 896, 151_936  # Qwen2.5-0.5B's hidden size and vocabulary


def _one(tokens: int, chunk: int | None) -> dict:
    """One forward + backward of the head over ``tokens`` positions; peak RSS and seconds."""
    import torch

    from scalerl.algo.logprobs import head_logprobs

    torch.manual_seed(0)
    hidden = torch.randn(1, tokens, H, requires_grad=True)  # (1, M, H)
    weight = (torch.randn(V, H) / H**0.5).requires_grad_()  # (V, H)
    ids = torch.randint(0, V, (1, tokens))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    start = time.perf_counter()
    logp, _ = head_logprobs(hidden, weight, None, ids, chunk=chunk)
    logp.sum().backward()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"peak_gib": peak / 2**20, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child: "TOKENS,CHUNK"
    args = ap.parse_args()
    if args.one is not None:
        tokens, chunk = args.one.split(",")
        print(json.dumps(_one(int(tokens), None if chunk == "none" else int(chunk))))
        return
    logits_gib = args.tokens * V * 4 / 2**30
    print(f"head H={H}, V={V:,}, {args.tokens} positions: float32 logits {logits_gib:.2f} GiB whole, "
          f"{args.chunk * V * 4 / 2**30:.2f} GiB per chunk of {args.chunk}")
    variants = {"whole": "none", f"chunk {args.chunk}": str(args.chunk)}
    best: dict[str, dict] = {}
    for _ in range(args.repeats):
        for name, chunk in variants.items():
            out = subprocess.run([sys.executable, __file__, "--one", f"{args.tokens},{chunk}"],
                                 check=True, capture_output=True, text=True).stdout
            got = json.loads(out)
            prev = best.get(name)
            best[name] = {"peak_gib": min(got["peak_gib"], prev["peak_gib"]) if prev else got["peak_gib"],
                          "seconds": min(got["seconds"], prev["seconds"]) if prev else got["seconds"]}
    for name, got in best.items():
        print(f"{name:>12}: peak {got['peak_gib']:.2f} GiB above the inputs, {got['seconds']:.2f} s forward + backward")
    whole, chunked = best["whole"], best[f"chunk {args.chunk}"]
    print(f"peak memory whole / chunked = {whole['peak_gib'] / chunked['peak_gib']:.2f}x; "
          f"time chunked / whole = {chunked['seconds'] / whole['seconds']:.2f}x")


if __name__ == "__main__":
    main()
