"""Per-token policy objectives in a name registry (digest §2.3, §2.10; paper Eq. 2–8).

Every loss has one signature::

    fn(logp,            # (N, T) log π_train(y_t) under the trainer, with grad
       behaviour_logp,  # (N, T) log π_gen(y_t) recorded at sampling time
       advantages,      # (N,)   Â_i, one per completion
       mask,            # (N, T) bool, True on tokens that enter the loss
       *, entropy=None,  # (N, T) optional token entropy, only for the entropy metric
       **its_own_hparams) -> LossOutput

and returns per-token *losses* (to minimise, zero where ``mask`` is False) plus metrics.
The reduction over tokens is not done here: ``scalerl.algo.aggregate`` owns it, so every loss
combines with every aggregation mode. The token IS ratio is (Eq. 2)
``ρ_{i,t} = π_train(y_{i,t}) / π_gen(y_{i,t}) = exp(logp − behaviour_logp)``.

Metrics (detached 0-dim tensors, all over masked tokens only; no ``.item()`` so no device sync):

- ``clip_frac``: fraction of tokens whose IS weight is clipped/truncated. For the PPO-style
  losses (dapo, grpo, gspo) it is the fraction whose gradient is zeroed by the clip.
- ``is_ratio_min`` / ``is_ratio_mean`` / ``is_ratio_max``: token ρ (1.0 on an empty mask).
- ``approx_kl``: the k3 estimator ``E_{y~π_gen}[ρ − 1 − log ρ]`` of KL(π_gen ‖ π_train)
  (Schulman, "Approximating KL divergence", 2020): unbiased under samples from the generator
  and non-negative token by token, unlike k1 = ``mean(behaviour_logp − logp)``.
- ``entropy``: mean of the given token ``entropy`` in nats (``algo.logprobs.head_logprobs`` makes it
  beside the log-probs, chunk by chunk, so no loss needs the [N, T, V] logits), only when given.

Padding under ``mask == False`` may hold any finite or infinite values: they are replaced
before any arithmetic, so they change neither the loss nor its gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import torch

RATIO_EXTREMA = MappingProxyType({"is_ratio_min": "min", "is_ratio_max": "max"})
"""How the shared extrema metrics combine across micro-batches; every other one is a mean."""


class LossOutput(NamedTuple):
    per_token: torch.Tensor  # (N, T) loss to minimise, zero where mask is False
    metrics: dict[str, torch.Tensor]  # name -> detached 0-dim tensor
    reductions: Mapping[str, str] = RATIO_EXTREMA
    """How each metric combines across micro-batches: ``min``, ``max``; unlisted ones are
    token-weighted means. Each loss declares its own (GSPO adds its sequence extrema)."""


LossFn = Callable[..., LossOutput]

_REGISTRY: dict[str, LossFn] = {}
LOSSES = MappingProxyType(_REGISTRY)
"""Read-only live view of the registry: loss name -> function."""


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Decorator adding a loss to the registry under ``name`` (as verl's ``register_policy_loss``)."""

    def decorate(fn: LossFn) -> LossFn:
        if name in _REGISTRY:
            raise ValueError(f"loss {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return decorate


def get_loss(name: str) -> LossFn:
    """The loss registered as ``name``; an unknown name raises a ValueError listing valid ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown loss {name!r}; valid losses are: {valid}") from None


# ---------------------------------------------------------------------------------------------
# Shared pieces


def _check_inputs(logp, behaviour_logp, advantages, mask) -> None:
    if logp.shape != behaviour_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp, behaviour_logp and mask must share one (N, T) shape; got "
            f"{tuple(logp.shape)}, {tuple(behaviour_logp.shape)}, {tuple(mask.shape)}"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"advantages must have shape (N,) = ({logp.shape[0]},); got {tuple(advantages.shape)}"
        )
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor; got {mask.dtype}")


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask``; 0 on an empty mask."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def _detached_log_ratio(logp, behaviour_logp, mask) -> torch.Tensor:  # (N, T)
    """``sg(log ρ)``, with 0 (ρ = 1) under the mask so padding can never produce inf or NaN."""
    return torch.where(mask, logp.detach() - behaviour_logp.detach(), 0.0)


def _metrics(
    log_ratio: torch.Tensor,  # (N, T) detached log ρ, 0 under the mask
    mask: torch.Tensor,  # (N, T) bool
    clipped: torch.Tensor,  # (N, T) bool
    entropy: torch.Tensor | None,  # (N, T) token entropy
) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        ratio = log_ratio.exp()
        any_token = mask.any()
        one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
        inf = torch.inf
        metrics = {
            "clip_frac": _masked_mean((clipped & mask).to(ratio.dtype), mask),
            "is_ratio_min": torch.where(any_token, torch.where(mask, ratio, inf).amin(), one),
            "is_ratio_mean": torch.where(any_token, _masked_mean(ratio, mask), one),
            "is_ratio_max": torch.where(any_token, torch.where(mask, ratio, -inf).amax(), one),
            "approx_kl": _masked_mean(ratio - 1.0 - log_ratio, mask),
        }
        if entropy is not None:
            metrics["entropy"] = _masked_mean(entropy.detach(), mask)
    return metrics


def _weighted_policy_gradient(
    logp: torch.Tensor,  # (N, T) with grad
    weight: torch.Tensor,  # (N, T) detached IS weight
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
) -> torch.Tensor:  # (N, T)
    """``−sg(w) · Â · log π``: REINFORCE with a (truncated) IS weight; zero under the mask."""
    logp = torch.where(mask, logp, 0.0)
    per_token = -weight.detach() * advantages.detach()[:, None] * logp
    return torch.where(mask, per_token, 0.0)


def _clipped_surrogate(
    ratio: torch.Tensor,  # (N, T) with grad
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # (N, T) loss, (N, T) bool clip active
    """PPO surrogate ``−min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)·Â)`` (Eq. 3).

    The branch is picked with an explicit ``where`` rather than ``torch.minimum`` so that the
    gradient is exactly zero where the clipped term wins (Â > 0 and ρ > 1+ε_high, or Â < 0
    and ρ < 1−ε_low) and exactly the unclipped gradient elsewhere, with no tie-splitting.
    """
    adv = advantages.detach()[:, None]
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    clip_active = (clipped < unclipped).detach() & mask
    per_token = -torch.where(clip_active, clipped, unclipped)
    return torch.where(mask, per_token, 0.0), clip_active


def _check_clip(name: str, low: float, high: float) -> None:
    if not (0.0 <= low < 1.0 and high >= 0.0):
        raise ValueError(
            f"{name}: clip range needs 0 <= low < 1 and high >= 0; got low={low}, high={high}"
        )


# ---------------------------------------------------------------------------------------------
# The losses


@register_loss("cispo")
def cispo(
    logp: torch.Tensor,  # (N, T)
    behaviour_logp: torch.Tensor,  # (N, T)
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
    *,
    entropy: torch.Tensor | None = None,  # (N, T) token entropy, for the metric
    eps_max: float = 5.0,
    eps_min: float | None = None,
) -> LossOutput:
    """CISPO (paper Eq. 4, ScaleRL's choice): ``ℓ = −sg(min(ρ, ε_max)) · Â · log π_train``.

    Truncated importance sampling on plain REINFORCE: the gradient ``−sg(min(ρ, ε_max))·Â·∇log π``
    flows only through ``log π``; the IS weight is capped from above and detached, so no token
    is ever zeroed, unlike PPO/DAPO clipping. ``eps_max`` and ``eps_min`` are *absolute* bounds
    on the weight (not offsets from 1); ``eps_min=None`` means no lower truncation, the paper's
    "lower clip ratio fixed at 0".

    Default ``eps_max = 5.0``: the paper's sweep (A.17.2, Fig. 19b) found ε_max ∈ {4, 5, 8}
    indistinguishable and never states the single value ScaleRL used; 5 is the middle of that
    tested range and TRL's recommended value, so runs compare directly with TRL's CISPO.
    """
    _check_inputs(logp, behaviour_logp, advantages, mask)
    if eps_max <= 0 or (eps_min is not None and not 0 <= eps_min <= eps_max):
        raise ValueError(
            f"cispo needs 0 <= eps_min <= eps_max and eps_max > 0; got {eps_min}, {eps_max}"
        )
    log_ratio = _detached_log_ratio(logp, behaviour_logp, mask)
    ratio = log_ratio.exp()
    weight = ratio.clamp(min=eps_min, max=eps_max)
    truncated = ratio > eps_max
    if eps_min is not None:
        truncated = truncated | (ratio < eps_min)
    per_token = _weighted_policy_gradient(logp, weight, advantages, mask)
    return LossOutput(per_token, _metrics(log_ratio, mask, truncated, entropy))


@register_loss("dapo")
def dapo(
    logp: torch.Tensor,  # (N, T)
    behaviour_logp: torch.Tensor,  # (N, T)
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
    *,
    entropy: torch.Tensor | None = None,  # (N, T) token entropy, for the metric
    eps_low: float = 0.2,
    eps_high: float = 0.28,
) -> LossOutput:
    """DAPO asymmetric clip (paper Eq. 3/8): ``ℓ = −min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)·Â)``.

    The gradient is exactly zero when Â > 0 and ρ > 1+ε_high, or Â < 0 and ρ < 1−ε_low.
    Defaults 0.2 / 0.28 are the DAPO paper's own ("clip-higher"). The ScaleRL paper's
    Qwen2.5-style baseline used ε_high = 0.26 (digest §2.3) and shows ε_high moves the
    asymptote (A.17.1), so recipes reproducing that baseline set ``eps_high=0.26`` explicitly.
    """
    _check_inputs(logp, behaviour_logp, advantages, mask)
    _check_clip("dapo", eps_low, eps_high)
    log_ratio = torch.where(mask, logp - behaviour_logp.detach(), 0.0)
    per_token, clip_active = _clipped_surrogate(
        log_ratio.exp(), advantages, mask, eps_low, eps_high
    )
    return LossOutput(per_token, _metrics(log_ratio.detach(), mask, clip_active, entropy))


@register_loss("grpo")
def grpo(
    logp: torch.Tensor,  # (N, T)
    behaviour_logp: torch.Tensor,  # (N, T)
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
    *,
    entropy: torch.Tensor | None = None,  # (N, T) token entropy, for the metric
    eps_clip: float = 0.2,
) -> LossOutput:
    """GRPO / PPO symmetric clip (paper A.2, Eq. 5–7): ``ℓ = −min(ρÂ, clip(ρ, 1±ε)·Â)``, ε = 0.2.

    No KL term: ScaleRL and its baselines train without one (digest §2.1).
    """
    _check_inputs(logp, behaviour_logp, advantages, mask)
    _check_clip("grpo", eps_clip, eps_clip)
    log_ratio = torch.where(mask, logp - behaviour_logp.detach(), 0.0)
    per_token, clip_active = _clipped_surrogate(
        log_ratio.exp(), advantages, mask, eps_clip, eps_clip
    )
    return LossOutput(per_token, _metrics(log_ratio.detach(), mask, clip_active, entropy))


GSPO_REDUCTIONS = MappingProxyType({**RATIO_EXTREMA, "seq_ratio_min": "min", "seq_ratio_max": "max"})


@register_loss("gspo")
def gspo(
    logp: torch.Tensor,  # (N, T)
    behaviour_logp: torch.Tensor,  # (N, T)
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
    *,
    entropy: torch.Tensor | None = None,  # (N, T) token entropy, for the metric
    gspo_eps_low: float = 3e-3,
    gspo_eps_high: float = 4e-3,
) -> LossOutput:
    """GSPO (§3.2, A.17.3), token form: ``ℓ_{i,t} = −min(s_{i,t}Â_i, clip(s_{i,t}, 1−ε_l, 1+ε_h)·Â_i)``.

    Sequence ratio, length-normalised (geometric mean over the completion's masked tokens):
    ``s_i = exp( (1/|y_i|) Σ_t (logp − behaviour_logp) )``. The token form
    ``s_{i,t} = sg(s_i) · π(y_t) / sg(π(y_t))`` equals ``s_i`` in value and has gradient
    ``s_i ∇log π(y_t)``, so averaging over a completion's tokens (``sample`` aggregation)
    gives exactly GSPO's ``s_i Â_i (1/|y_i|) Σ_t ∇log π``: the ``1/|y_i|`` comes from the
    aggregation, not from here. Clipping acts on the whole sequence.

    Defaults: lower 3e-3, upper 4e-3, the paper's "gspo_4_3_e_3" setting (A.17.3, Fig. 20):
    the 1e-3 scale scaled well where GSPO's own 1e-4 default did not; upper 5e-3 was
    "slightly better" but within noise, and 4e-3 is the value the digest names as stable.
    """
    _check_inputs(logp, behaviour_logp, advantages, mask)
    _check_clip("gspo", gspo_eps_low, gspo_eps_high)
    log_ratio = _detached_log_ratio(logp, behaviour_logp, mask)
    lengths = mask.sum(dim=1).clamp(min=1)  # (N,)
    seq_ratio = (log_ratio.sum(dim=1) / lengths).exp()  # (N,) s_i, detached
    logp = torch.where(mask, logp, 0.0)
    token_ratio = seq_ratio[:, None] * torch.exp(logp - logp.detach())  # (N, T) value s_i
    per_token, clip_active = _clipped_surrogate(
        token_ratio, advantages, mask, gspo_eps_low, gspo_eps_high
    )
    metrics = _metrics(log_ratio, mask, clip_active, entropy)
    with torch.no_grad():
        has_tokens = mask.any(dim=1)  # (N,)
        one = torch.ones((), dtype=seq_ratio.dtype, device=seq_ratio.device)
        any_seq = has_tokens.any()
        metrics["seq_ratio_min"] = torch.where(
            any_seq, torch.where(has_tokens, seq_ratio, torch.inf).amin(), one
        )
        metrics["seq_ratio_mean"] = torch.where(any_seq, _masked_mean(seq_ratio, has_tokens), one)
        metrics["seq_ratio_max"] = torch.where(
            any_seq, torch.where(has_tokens, seq_ratio, -torch.inf).amax(), one
        )
    return LossOutput(per_token, metrics, GSPO_REDUCTIONS)


@register_loss("reinforce")
def reinforce(
    logp: torch.Tensor,  # (N, T)
    behaviour_logp: torch.Tensor,  # (N, T)
    advantages: torch.Tensor,  # (N,)
    mask: torch.Tensor,  # (N, T) bool
    *,
    entropy: torch.Tensor | None = None,  # (N, T) token entropy, for the metric
    tis_cap: float | None = None,
) -> LossOutput:
    """REINFORCE: ``ℓ = −Â · log π_train``, on-policy (no IS weight) when ``tis_cap`` is None.

    With ``tis_cap = c`` it adds the truncated-IS correction ``sg(min(ρ, c))``, which makes it
    the same estimator as CISPO without a lower bound; it exists as the on-policy baseline.
    """
    _check_inputs(logp, behaviour_logp, advantages, mask)
    if tis_cap is not None and tis_cap <= 0:
        raise ValueError(f"reinforce: tis_cap must be positive or None; got {tis_cap}")
    log_ratio = _detached_log_ratio(logp, behaviour_logp, mask)
    ratio = log_ratio.exp()
    if tis_cap is None:
        weight = torch.ones_like(ratio)
        truncated = torch.zeros_like(mask)
    else:
        weight = ratio.clamp(max=tis_cap)
        truncated = ratio > tis_cap
    per_token = _weighted_policy_gradient(logp, weight, advantages, mask)
    return LossOutput(per_token, _metrics(log_ratio, mask, truncated, entropy))
