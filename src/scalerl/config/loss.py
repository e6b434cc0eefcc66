"""The ``loss`` section of the trainer config: the objective, its aggregation, each loss's own
hyperparameters and the training–inference mismatch correction around it.

Each loss keeps its own hyperparameter names (``loss.cispo.eps_max``, ``loss.dapo.eps_high``
...), mirroring the ``scalerl.algo.losses`` signatures, so no name changes meaning with the
loss (the TRL ``epsilon_high`` trap); so does each correction (``loss.is_correction.tis.cap``,
``loss.is_correction.mis.low`` ...).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from scalerl.config.base import Frozen as _Frozen


class CispoParams(_Frozen):
    eps_max: float = 5.0
    """Upper cap of the stop-gradient IS weight ``min(ρ, ε_max)`` (Eq. 4; 4, 5, 8 all work)."""
    eps_min: float | None = None
    """Lower cap of the IS weight; None is the paper's "lower clip ratio fixed at 0"."""


class DapoParams(_Frozen):
    eps_low: float = 0.2
    """Lower clip offset: ratios below ``1 − eps_low`` are clipped (Eq. 8)."""
    eps_high: float = 0.28
    """Upper clip offset: ratios above ``1 + eps_high`` are clipped (Eq. 8; Qwen2.5 used 0.26)."""


class GrpoParams(_Frozen):
    eps_clip: float = 0.2
    """Symmetric PPO clip ``clip(ρ, 1 ± ε)`` (A.2 Eq. 5–7)."""


class GspoParams(_Frozen):
    gspo_eps_low: float = 3e-3
    """Lower clip offset of the sequence-level ratio (A.17.3)."""
    gspo_eps_high: float = 4e-3
    """Upper clip offset of the sequence-level ratio (A.17.3)."""


class ReinforceParams(_Frozen):
    tis_cap: float | None = None
    """Truncated-IS cap on the token ratio; None means no off-policy correction."""


class _Band(_Frozen):
    @model_validator(mode="after")
    def _ordered(self) -> _Band:
        if not self.low < self.high:
            raise ValueError(f"needs low < high; got low={self.low}, high={self.high}")
        return self


class TisParams(_Frozen):
    cap: float = Field(2.0, gt=0)
    """Token weight ``min(ρ_t, cap)`` (truncated IS; 2.0 is the token-level cap of TRL's Olmo-3
    recipe)."""


class MisParams(_Band):
    low: float = Field(0.5, ge=0)
    """Tokens with ``ρ_t < low`` are dropped (masked IS; the band of ``mismatch_ratio_out_frac``)."""
    high: float = Field(2.0, gt=0)
    """Tokens with ``ρ_t > high`` are dropped."""


class SeqMaskParams(_Band):
    low: float = Field(0.0, ge=0)
    """Completions whose geometric-mean ratio is below ``low`` are dropped (0: an upper mask only,
    as TRL's ``sequence_mask``)."""
    high: float = Field(3.0, gt=0)
    """Completions whose geometric-mean ratio is above ``high`` are dropped (TRL's default cap)."""


class ISCorrectionConfig(_Frozen):
    mode: Literal["none", "tis", "mis", "seq_mask"] = "none"
    """``tis``: token weight ``min(ρ, cap)`` with ρ = π_train/π_gen (truncated IS); ``mis``:
    tokens with ρ outside [low, high] are dropped (masked IS); ``seq_mask``: completions whose
    geometric-mean ρ is outside [low, high] are dropped (TRL's ``sequence_mask``). One at a time:
    each replaces the loss's own IS ratio (``scalerl.algo.mismatch``). ``none`` in ScaleRL: CISPO
    already truncates its IS weight at ``eps_max``."""
    tis: TisParams = TisParams()
    """Parameters of ``tis``."""
    mis: MisParams = MisParams()
    """Parameters of ``mis``."""
    seq_mask: SeqMaskParams = SeqMaskParams()
    """Parameters of ``seq_mask``."""

    def band(self) -> dict[str, float]:
        """``cap`` and ``low`` of the selected mode, as ``algo.mismatch.is_correction`` takes them."""
        if self.mode == "tis":
            return {"cap": self.tis.cap, "low": 0.0}
        params = self.mis if self.mode == "mis" else self.seq_mask
        return {"cap": params.high, "low": params.low}


class LossConfig(_Frozen):
    name: Literal["cispo", "dapo", "grpo", "gspo", "reinforce"] = "cispo"
    """Registered per-token objective (``scalerl.algo.losses``); digest §2.3."""
    aggregation: Literal["prompt", "sample", "token"] = "prompt"
    """Loss reduction (digest §2.5): prompt average is the recipe."""
    cispo: CispoParams = CispoParams()
    """Hyperparameters of ``cispo``."""
    dapo: DapoParams = DapoParams()
    """Hyperparameters of ``dapo``."""
    grpo: GrpoParams = GrpoParams()
    """Hyperparameters of ``grpo``."""
    gspo: GspoParams = GspoParams()
    """Hyperparameters of ``gspo``."""
    reinforce: ReinforceParams = ReinforceParams()
    """Hyperparameters of ``reinforce``."""
    is_correction: ISCorrectionConfig = ISCorrectionConfig()
    """Training–inference mismatch correction applied around the loss (``algo.mismatch``)."""

    def hparams(self) -> dict[str, Any]:
        """Keyword arguments of the selected loss: only its own names."""
        return getattr(self, self.name).model_dump()
