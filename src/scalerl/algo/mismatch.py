"""Training–inference mismatch: how far the generator's log-probs are from the trainer's, and
the importance-sampling corrections that bound its effect (digest §2.4 on the FP32 head).

The generator records ``log π_gen(y_t)`` while sampling; the trainer recomputes
``log π_train(y_t)``. Even with identical weights they differ (dtype, kernels, KV-cache versus
full-sequence attention, batch shape); with in-flight updates the generator's version may also
be older. The per-token ratio is ``ρ_t = π_train(y_t) / π_gen(y_t) = exp(log π_train − log π_gen)``.

**Statistics** (:func:`mismatch_sums`, combined over micro-batches by :func:`mismatch_metrics`):

- ``mismatch_kl``: the k3 estimator of KL(π_gen ‖ π_train) on the sampled tokens,
  ``E_{y~π_gen}[ρ − 1 − log ρ]`` (Schulman 2020), unbiased under the generator's samples and
  non-negative per token;
- ``mismatch_logp_abs_max`` / ``mismatch_logp_abs_mean``: max and mean of ``|log ρ_t|``;
- ``mismatch_ratio_out_frac``: share of tokens with ``ρ_t`` outside ``[0.5, 2]``.

**Corrections** (:func:`is_correction`), each returning a detached per-token weight ``w_t`` and
the tokens kept. They *replace* the loss's own importance ratio: the loss is evaluated against
the trainer's detached log-prob (its ratio is 1 in value, so with one update per batch its clip
is inactive), and the generator-to-trainer ratio enters only through ``w``, as TRL does with
``vllm_importance_sampling_correction`` (its PPO ratio uses the trainer's old log-probs):

- ``tis`` (token-level truncated IS; Yao et al. 2025, "Your efficient RL framework secretly
  brings you off-policy RL training"; TRL ``token_truncate``): ``w_t = min(ρ_t, C)``;
- ``mis`` (token-level masked IS; TRL ``token_mask``, verl rollout-correction ``token``
  rejection): ``w_t = ρ_t`` if ``lo ≤ ρ_t ≤ C``, and the token is dropped otherwise;
- ``seq_mask`` (sequence-level mask, TRL ``sequence_mask`` on the length-normalised ratio):
  ``s_i = exp((1/|y_i|) Σ_t log ρ_{i,t})``, the geometric mean; ``w_{i,t} = s_i`` if
  ``lo ≤ s_i ≤ C``, else the whole completion is dropped. The geometric mean, unlike TRL's
  product, does not underflow on long completions.

CISPO already truncates ``ρ`` at ``ε_max`` (Eq. 4), which is the ``tis`` estimator, so all
three default off in the ScaleRL recipe.
"""

from __future__ import annotations

import torch

CORRECTIONS = ("none", "tis", "mis", "seq_mask")
RATIO_BAND = (0.5, 2.0)
"""The band whose outside share ``mismatch_ratio_out_frac`` reports."""


def _log_ratio(logp, gen_logp, mask) -> torch.Tensor:  # (N, T) detached, 0 under ~mask
    return torch.where(mask, logp.detach() - gen_logp.detach(), 0.0)


def mismatch_sums(
    logp: torch.Tensor,  # (N, T) trainer log-probs
    gen_logp: torch.Tensor,  # (N, T) generator log-probs of the same tokens
    mask: torch.Tensor,  # (N, T) bool: sampled tokens to measure
) -> dict[str, torch.Tensor]:
    """Detached sums over ``mask`` (``n``, ``kl``, ``abs``, ``abs_max``, ``out``) that add up
    across micro-batches; :func:`mismatch_metrics` turns them into the logged means."""
    with torch.no_grad():
        lr = _log_ratio(logp, gen_logp, mask)
        m = mask.to(lr.dtype)
        ratio = lr.exp()
        lo, hi = RATIO_BAND
        # ρ − 1 − log ρ ≈ (log ρ)²/2 cancels badly near ρ = 1 in float32 (it read −2e-9 on equal
        # weights): expm1 in float64 keeps each token's term at its true sign, ≥ 0
        lr64 = lr.double()
        k3 = (torch.expm1(lr64) - lr64).clamp(min=0.0)
        return {
            "n": m.sum(),
            "kl": (k3 * m.double()).sum(),
            "abs": (lr.abs() * m).sum(),
            "abs_max": lr.abs().amax() if lr.numel() else lr.new_zeros(()),
            "out": (((ratio < lo) | (ratio > hi)) & mask).to(lr.dtype).sum(),
        }


def mismatch_metrics(parts: list[dict[str, torch.Tensor]], prefix: str = "mismatch") -> dict[str, float]:
    """Means of :func:`mismatch_sums` over all parts, and ``{prefix}_tokens``, the count they are
    over. With no tokens the means are NaN, not 0.0, which would read as perfect agreement."""
    n = sum(float(p["n"]) for p in parts)
    if n == 0:
        nan = float("nan")
        return {f"{prefix}_{k}": nan for k in ("kl", "logp_abs_mean", "logp_abs_max", "ratio_out_frac")} | {
            f"{prefix}_tokens": 0}
    denom = n
    return {
        f"{prefix}_tokens": int(n),
        f"{prefix}_kl": sum(float(p["kl"]) for p in parts) / denom,
        f"{prefix}_logp_abs_mean": sum(float(p["abs"]) for p in parts) / denom,
        f"{prefix}_logp_abs_max": max((float(p["abs_max"]) for p in parts), default=0.0),
        f"{prefix}_ratio_out_frac": sum(float(p["out"]) for p in parts) / denom,
    }


def is_correction(
    logp: torch.Tensor,  # (N, T) trainer log-probs
    gen_logp: torch.Tensor,  # (N, T) generator log-probs
    mask: torch.Tensor,  # (N, T) bool
    *,
    mode: str,
    cap: float,
    low: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:  # (N, T) detached weight, (N, T) bool kept tokens
    """The correction weight ``w`` and the kept-token mask of ``mode`` (module doc)."""
    if mode not in CORRECTIONS:
        raise ValueError(f"unknown IS correction {mode!r}; valid: {', '.join(CORRECTIONS)}")
    if not 0.0 <= low < cap:
        raise ValueError(f"IS correction needs 0 <= low < cap; got low={low}, cap={cap}")
    lr = _log_ratio(logp, gen_logp, mask)
    ratio = lr.exp()
    if mode == "none":
        return torch.ones_like(ratio), mask
    if mode == "tis":
        return ratio.clamp(max=cap), mask  # w = min(ρ, C); ``low`` belongs to the two masks
    if mode == "mis":
        keep = mask & (ratio >= low) & (ratio <= cap)
        return torch.where(keep, ratio, 0.0), keep
    lengths = mask.sum(dim=1).clamp(min=1)  # (N,)
    seq = (lr.sum(dim=1) / lengths).exp()  # (N,) geometric-mean ratio s_i
    keep_row = (seq >= low) & (seq <= cap)  # (N,)
    keep = mask & keep_row[:, None]
    return torch.where(keep, seq[:, None].expand_as(ratio), 0.0), keep


def corrected_loss(
    loss_fn,
    logp: torch.Tensor,  # (N, T) with grad
    gen_logp: torch.Tensor,  # (N, T)
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
    *,
    mode: str,
    cap: float,
    low: float = 0.0,
    **hparams,
):
    """``loss_fn`` with the ``mode`` correction: ``ℓ_t = w_t · ℓ_t(logp, sg(logp))`` on the
    kept tokens, zero on dropped ones (which still count in the aggregation's denominators,
    as in TRL). ``mode="none"`` is ``loss_fn`` against the generator's log-probs, unchanged."""
    if mode == "none":
        return loss_fn(logp, gen_logp, advantages, mask, **hparams)
    weight, keep = is_correction(logp, gen_logp, mask, mode=mode, cap=cap, low=low)
    out = loss_fn(logp, logp.detach(), advantages, keep, **hparams)
    metrics = dict(out.metrics)
    with torch.no_grad():
        kept = keep.to(weight.dtype)
        metrics["is_correction_weight_mean"] = (weight * kept).sum() / kept.sum().clamp(min=1)
        metrics["is_correction_dropped_frac"] = 1.0 - kept.sum() / mask.sum().clamp(min=1)
    return out._replace(per_token=torch.where(keep, out.per_token * weight, 0.0), metrics=metrics)
