"""The parts of the ``model`` section about what is trained and what comes out: LoRA and the
exported Hugging Face directory (``RUN_DIR/model``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from scalerl.config_base import Frozen as _Frozen


class LoraConfig(_Frozen):
    """LoRA adapters through ``peft`` (``scalerl.models.lora``): only they train and travel."""

    rank: int = Field(16, ge=1)
    """Adapter rank r: ``W' = W0 + (alpha / r) · B A`` with ``A (r, in)``, ``B (out, r)``."""
    alpha: float = Field(32.0, gt=0)
    """Scale numerator; the update is scaled by ``alpha / rank``."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter's input while training (generators sample without it)."""
    targets: tuple[str, ...] | Literal["auto"] = "auto"
    """The layers that get adapters, by the last part of their module name, as peft's
    ``target_modules`` takes them (``[q_proj, v_proj]``; GPT-2's ``[c_attn]``). ``auto``: every
    ``nn.Linear`` or transformers ``Conv1D`` projection inside the model's decoder blocks, found
    from the model at start, printed, and recorded in the adapter's ``adapter_config.json``
    (Llama, Qwen2, Mistral: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
    GPT-2: c_attn, c_proj, c_fc). Never the LM head or the embeddings: the head stays FP32 and
    frozen. Names the model does not have are refused before the run starts, listing the
    ones it has."""

    @field_validator("targets", mode="before")
    @classmethod
    def _auto_or_names(cls, value):
        if isinstance(value, str) and value != "auto":
            raise ValueError(f"model.lora.targets is auto or a list of layer names, such as [{value}]")
        return value

    def spec(self):
        from scalerl.models.lora import LoraSpec

        return LoraSpec(self.rank, self.alpha, self.dropout, None if self.targets == "auto" else tuple(self.targets))


class ExportConfig(_Frozen):
    """``RUN_DIR/model``: the policy as a Hugging Face directory, written at every checkpoint."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the exported weights (the learner's master weights are cast to it)."""
