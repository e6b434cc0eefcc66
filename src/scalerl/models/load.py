"""Load any Hugging Face causal LM (with its tokenizer) from disk, and save one back.

Nothing is downloaded: ``path`` must be a local model directory (``config.json`` plus
weights). The body may run in bf16 while the LM head is later computed in fp32 (digest §2.4);
that is the engine's and trainer's business, not the loader's.
"""

from __future__ import annotations

from pathlib import Path

import torch

from scalerl.models.build import ATTN_IMPLEMENTATION

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"`` / ``"bfloat16"`` / ``"float16"`` (or a ``torch.dtype``) -> ``torch.dtype``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def load_pretrained(path: str | Path, dtype: str | torch.dtype = "float32"):
    """``(model, tokenizer)`` from a local Hugging Face model directory, model in eval mode.

    Raises ``FileNotFoundError`` with one sentence if ``path`` is not a model directory.
    """
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} is not a Hugging Face model directory (no config.json found there)."
        )
    torch_dtype = resolve_dtype(dtype)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, attn_implementation=ATTN_IMPLEMENTATION, local_files_only=True
    )
    tokenizer = load_tokenizer(path)
    if tokenizer.pad_token is None:
        # Batched sampling needs a pad id; EOS is the common stand-in for pretrained LMs.
        tokenizer.pad_token = tokenizer.eos_token
    return model.eval(), tokenizer


def load_tokenizer(path: Path):
    """``AutoTokenizer``, except for scalerl's own task tokenizer saved next to a qwen2 model.

    transformers 5.x replaces the tokenizer class declared for ``model_type="qwen2"``
    directories by ``Qwen2Tokenizer``, which would rebuild ours with a byte-level
    pre-tokenizer; a marker in ``tokenizer_config.json`` lets us load it as saved.
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = path / "tokenizer_config.json"
    if config_file.is_file() and json.loads(config_file.read_text()).get("scalerl_task_tokenizer"):
        return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def save_pretrained(model, tokenizer, directory: str | Path) -> Path:
    """Write model weights, config and tokenizer so ``load_pretrained(dir)`` loads both.

    ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained(dir)`` load them too, except that
    transformers 5.x swaps scalerl's task tokenizer for ``Qwen2Tokenizer`` next to a qwen2
    model (use ``load_pretrained`` or the default llama architecture there).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


DROPOUT_ATTRIBUTES = ("attention_dropout", "dropout", "attn_dropout")
"""Float attributes through which attention modules apply dropout functionally (Llama and
Qwen2's ``attention_dropout`` passed to sdpa while training), besides ``nn.Dropout`` modules."""


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every dropout of its own at 0, in place: RL's learner runs its forward in
    train mode, and the generators sample in eval mode, so a dropout left on (GPT-2's default
    0.1) makes the learner's log-probs of the sampled tokens differ from the generators' (a
    0.11 mismatch on GPT-2, against 1e-6 without) and every importance ratio noise. Apply it
    before LoRA: peft's own ``lora_dropout`` is a regulariser the user chose, and stays."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name in DROPOUT_ATTRIBUTES:
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, 0.0)
    return model
