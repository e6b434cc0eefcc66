"""Generator-trainer log-prob mismatch: the numbers of digest §2.4 (ICLR A.19, Figs. 21-23).

At a given version the importance ratio ``ρ_t = π_train(y_t) / π_gen(y_t)`` should be exactly
1; kernel and precision differences move it. We summarise, over the tokens in ``mask``:
- ``mean_abs_diff``  = mean_t |log π_train(y_t) − log π_gen(y_t)|;
- ``is_ratio_min``, ``is_ratio_max`` = min_t / max_t of ``exp(log π_train − log π_gen)``;
- ``pearson``        = Pearson correlation of the two log-prob series (1 = identical shape).
The FP32 head should shrink the first, pull both ratio extremes toward 1 and raise the last.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Mismatch:
    mean_abs_diff: float
    is_ratio_min: float
    is_ratio_max: float
    pearson: float
    num_tokens: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def mismatch(
    gen_logp: torch.Tensor,  # (N, T) behaviour log-probs recorded by the generator
    train_logp: torch.Tensor,  # (N, T) the trainer's recomputed log-probs of the same tokens
    mask: torch.Tensor,  # (N, T) bool: tokens to include (generated, not padding)
) -> Mismatch:
    """Summary statistics of ``log π_train − log π_gen`` over the masked tokens (see module)."""
    if gen_logp.shape != train_logp.shape or gen_logp.shape != mask.shape:
        raise ValueError(
            f"mismatch: shapes differ: gen {tuple(gen_logp.shape)}, train {tuple(train_logp.shape)}, "
            f"mask {tuple(mask.shape)}"
        )
    gen = gen_logp.detach()[mask].double()
    train = train_logp.detach()[mask].double()
    n = int(gen.numel())
    if n == 0:
        nan = float("nan")
        return Mismatch(nan, nan, nan, nan, 0)
    log_ratio = train - gen
    ratio = log_ratio.exp()
    pearson = float("nan")
    if n > 1 and float(gen.std()) > 0 and float(train.std()) > 0:
        pearson = float(torch.corrcoef(torch.stack([gen, train]))[0, 1])
    return Mismatch(
        mean_abs_diff=float(log_ratio.abs().mean()),
        is_ratio_min=float(ratio.min()),
        is_ratio_max=float(ratio.max()),
        pearson=pearson,
        num_tokens=n,
    )
