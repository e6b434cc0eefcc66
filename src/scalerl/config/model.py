"""The ``model`` section (what a run starts from, LoRA, the SFT warm-up of a built model) and
the ``export`` section (the Hugging Face directory a run writes, ``RUN_DIR/model``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from scalerl.config.base import Frozen as _Frozen
from scalerl.config.paths import TEMPLATE_NAMES


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



class ExportConfig(_Frozen):
    """``RUN_DIR/model``: the policy as a Hugging Face directory, written at every checkpoint."""

    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the exported weights (the learner's master weights are cast to it)."""


BUILT_MODEL_FIELDS = ("preset", "arch", "sft")
"""The ``model`` fields used only to build a model, none of them when ``model.base`` is set."""


class SFTConfig(_Frozen):
    """Supervised warm-up of a freshly built tiny model into a useful starting band."""

    target_band: tuple[float, float] = (0.2, 0.4)
    """Stop SFT once the validation pass rate lies in [lo, hi]; RL then has room to climb."""
    max_steps: int = Field(1000, ge=1)
    """The warm-up's budget in optimiser steps: it is a function of its steps, so the same config
    and seed give the same starting model on an idle or a busy machine (the default nano model
    reaches the band at step ~175). A warm-up that ends outside ``target_band`` stops the run
    (or the study) with one sentence, unless ``force``."""
    max_seconds: float | None = Field(None, gt=0)
    """A wall-clock safety net, off by default: a warm-up it ends says so, because its model then
    depends on the machine's speed (a busy machine once ended one outside its band)."""
    force: bool = False
    """Train from a warm-up that missed ``target_band`` anyway (``scalerl train --force``,
    ``scalerl sweep --force``); a warning line says so."""


class ModelConfig(_Frozen):
    """The model a run starts from. With ``base`` set, ``preset``, ``arch`` and ``sft`` (which
    only build and warm up a model) are unused: they keep their defaults whatever a layer
    says, and ``RUN_DIR/config.yaml`` leaves them out (:data:`BUILT_MODEL_FIELDS`)."""

    base: str | None = None
    """Directory of a local Hugging Face causal LM to start from; None builds ``preset`` and
    runs the SFT warm-up (cached in the run directory)."""
    preset: str = "nano"
    """Size preset of ``scalerl.models.build_model`` used when ``base`` is None."""
    arch: Literal["llama", "qwen2", "gpt2"] = "llama"
    """Architecture family of the built model (used when ``base`` is None;
    ``scalerl.models.build.ARCHS``)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype the model body computes in (the LM head follows ``fp32_head_*``). The learner
    always keeps float32 master weights and AdamW state: ``bfloat16`` computes its forward and
    backward under bf16 autocast and generators decode bf16 copies of each version;
    ``float16`` (CUDA only) the same in fp16, with dynamic loss scaling."""
    chat_template: str = "auto"
    """How prompts are rendered (``scalerl.models.chat``): ``auto`` applies the tokenizer's
    chat template whenever it has one (plain text otherwise), ``none`` never does, and a
    ``PATH.jinja`` file replaces the tokenizer's."""
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keywords passed to the chat template, e.g. ``{enable_thinking: false}``."""

    @model_validator(mode="before")
    @classmethod
    def _unused_when_based(cls, data: Any) -> Any:
        # dropped rather than refused: a recipe a user extends may set them for built models
        if isinstance(data, dict) and data.get("base") is not None:
            return {k: v for k, v in data.items() if k not in BUILT_MODEL_FIELDS}
        return data

    @field_validator("chat_template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value in TEMPLATE_NAMES:
            return value
        path = Path(value).expanduser()
        if path.suffix != ".jinja" or not path.is_file():
            raise ValueError(f"{value!r} is neither auto, none, nor an existing .jinja file")
        return str(path.resolve())
    fp32_head_trainer: bool = True
    """Compute the trainer's LM-head logits in FP32 (digest §2.4)."""
    fp32_head_generator: bool = True
    """Compute the generator's LM-head logits in FP32 (digest §2.4); both on is the recipe."""
    sft: SFTConfig = SFTConfig()
    """Warm-up settings, used only when ``base`` is None."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of every weight (``{rank, alpha, dropout, targets}``)."""
