"""Build a tiny Llama-, Qwen2- or GPT-2-style causal LM from a named size preset.

The paper trains an 8B dense model and a 17Bx16 MoE (digest §2.1); these presets are the
same decoder architecture shrunk to 1M-50M parameters so the whole ScaleRL loop runs on a
laptop CPU. Parameter counts measured with the built-in task tokenizer (vocab 140, untied):

| preset | hidden | layers | heads (kv) | mlp  | params (llama) |
|--------|--------|--------|------------|------|----------------|
| nano   | 128    | 4      | 4 (4)      | 384  | ~0.89M         |
| micro  | 192    | 6      | 6 (6)      | 512  | ~2.7M          |
| small  | 320    | 8      | 8 (4)      | 1152 | ~11.4M         |
| base   | 512    | 16     | 8 (4)      | 1536 | ~50.5M         |
| large  | 1024   | 16     | 16 (8)     | 2816 | ~190M          |
| qwen-0.5b | 896 | 24     | 14 (2)     | 4864 | 494,032,768 (qwen2) |

A GPT-2 (``arch="gpt2"``) has the same widths and depths, with GPT-2's own parts: learned
absolute positions, LayerNorm, biases, a GELU MLP and full multi-head attention (no grouped
KV heads), its dropout off (RL's log-ratios need the same forward at sampling and learning).

``large`` and ``qwen-0.5b`` are for GPU checks (``scripts/gpu_check.sh``), built from a config so
throughput on a GPU is measured without downloading weights. ``qwen-0.5b`` is Qwen2.5-0.5B's
shape, the size users start from: its embedding is padded to Qwen's 151,936 rows (the task
tokenizer's ids come first, as Qwen pads its own 151,643) and tied to the head, so with
``arch="qwen2"`` it has Qwen2.5-0.5B's parameter count and its LM head's cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

Arch = Literal["llama", "qwen2", "gpt2"]
ARCHS: tuple[str, ...] = get_args(Arch)
"""The architectures a model is built as (``model.arch``'s choices, held equal by a test)."""


@dataclass(frozen=True)
class Preset:
    """Shape of one model size; everything else is the architecture's default."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_position_embeddings: int = 2048
    vocab_size: int | None = None  # pad the embedding to this many rows (None: the tokenizer's size)
    tie_embeddings: bool | None = None  # the preset's own tying (None: the caller's)


PRESETS: dict[str, Preset] = {
    "nano": Preset(128, 4, 4, 4, 384),
    "micro": Preset(192, 6, 6, 6, 512),
    "small": Preset(320, 8, 8, 4, 1152),
    "base": Preset(512, 16, 8, 4, 1536),
    "large": Preset(1024, 16, 16, 8, 2816),
    # Qwen2.5-0.5B (its config.json): rope and norm settings are the architecture's defaults
    "qwen-0.5b": Preset(896, 24, 14, 2, 4864, max_position_embeddings=32768, vocab_size=151_936,
                        tie_embeddings=True),
}

ATTN_IMPLEMENTATION = "sdpa"
"""SDPA supports the KV cache on CPU in transformers 5.x and is faster than eager there."""


def model_config(preset: str, vocab_size: int, *, arch: Arch = "llama", tie_embeddings: bool = False,
                 bos_token_id: int | None = None, eos_token_id: int | None = None,
                 pad_token_id: int | None = None):
    """The transformers config (``LlamaConfig``, ``Qwen2Config`` or ``GPT2Config``) for ``preset``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {sorted(PRESETS)}")
    p = PRESETS[preset]
    vocab_size = max(vocab_size, p.vocab_size or 0)
    tie_embeddings = tie_embeddings if p.tie_embeddings is None else p.tie_embeddings
    ids = dict(bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    if arch == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(vocab_size=vocab_size, n_embd=p.hidden_size, n_layer=p.num_layers, n_head=p.num_heads,
                          n_inner=p.intermediate_size, n_positions=p.max_position_embeddings,
                          tie_word_embeddings=tie_embeddings, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                          layer_norm_epsilon=1e-5, **ids)  # fmt: skip
    common = dict(
        vocab_size=vocab_size,
        hidden_size=p.hidden_size,
        num_hidden_layers=p.num_layers,
        num_attention_heads=p.num_heads,
        num_key_value_heads=p.num_kv_heads,
        intermediate_size=p.intermediate_size,
        max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        rms_norm_eps=1e-6,
    )
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common)
    if arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")


def build_model(
    preset: str,
    vocab_size: int,
    *,
    arch: Arch = "llama",
    tie_embeddings: bool = False,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    tokenizer=None,
):
    """A freshly initialised causal LM of size ``preset`` (see ``PRESETS``), in eval mode.

    ``tokenizer`` (optional) supplies the bos/eos/pad ids written into the config, so
    ``generate`` and a later ``from_pretrained`` know them. Initialisation is seeded.
    """
    from transformers import AutoModelForCausalLM

    ids = {}
    if tokenizer is not None:
        ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    config = model_config(preset, vocab_size, arch=arch, tie_embeddings=tie_embeddings, **ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation=ATTN_IMPLEMENTATION, dtype=dtype
        )
    return model.eval()


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())
