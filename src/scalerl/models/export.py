"""The trained policy as a Hugging Face model directory: ``RUN_DIR/model``.

What a user does next with a trained policy — evaluate it with vLLM or lm-eval, publish it,
start another run from it — needs a directory that ``AutoModelForCausalLM.from_pretrained``
and ``AutoTokenizer.from_pretrained`` load: config, safetensors, the tokenizer with the chat
template the run rendered its prompts with, and the generation config (whose
``eos_token_id`` lists the end-of-turn tokens the generators stopped at).

- The weights are the learner's master weights (float32 unless ``dtype`` says otherwise),
  taken from the state the checkpoint holds, so ``model/`` and ``checkpoint/`` are always
  the same step.
- With LoRA the directory holds the adapter (``PeftModel.from_pretrained(base, dir)`` loads
  it), and ``merged/`` inside it the merged weights with the tokenizer: a complete model.
- The directory is written beside ``model/`` under a temporary name and swapped in by two
  renames, so a reader (or a kill) never sees half of one: at worst, between the renames,
  none (and the next export writes it again).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from scalerl.models.load import resolve_dtype


def cast_state(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` on the CPU with its floating tensors in ``dtype``."""
    return {k: v.detach().to("cpu", dtype=dtype if v.is_floating_point() else v.dtype) for k, v in state.items()}


def _save_full(model, state: Mapping[str, torch.Tensor], dtype: torch.dtype, directory: Path) -> None:
    """``model``'s config and generation config with ``state``'s weights in ``dtype``."""
    model.save_pretrained(directory, state_dict=cast_state(state, dtype))
    set_config_dtype(directory, dtype)


def set_config_dtype(directory: Path, dtype: torch.dtype) -> None:
    """``config.json``'s ``dtype``: ``save_pretrained`` writes the live parameters' dtype, and
    ``from_pretrained(dtype="auto")`` reads this field back, so it must say what was saved."""
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config["dtype"] = str(dtype).removeprefix("torch.")
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def write_model_dir(directory: str | Path, model, tokenizer, *, state: Mapping[str, torch.Tensor] | None = None,
                    dtype: str = "float32", chat_template: str | None = None) -> Path:
    """Write ``model`` (with the weights ``state``, default its own) and ``tokenizer`` to
    ``directory``, replacing what is there atomically. ``chat_template`` (a template's text)
    is saved with the tokenizer when the run rendered prompts with a template of its own.

    A peft model writes its adapter at the top and the merged model in ``merged/``."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    target = resolve_dtype(dtype)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        state = model.state_dict() if state is None else state
        saved_template = tokenizer.chat_template
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        try:
            if hasattr(model, "peft_config"):
                from scalerl.models.lora import save_adapter_and_merged

                save_adapter_and_merged(model, state, target, tmp, lambda d: tokenizer.save_pretrained(d))
            else:
                _save_full(model, state, target, tmp)
            tokenizer.save_pretrained(tmp)
        finally:
            tokenizer.chat_template = saved_template
        _swap_in(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _swap_in(tmp: Path, directory: Path) -> None:
    """Replace ``directory`` by ``tmp``: the old one is renamed away first and removed last."""
    old = None
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        old.rmdir()
        directory.rename(old)
    tmp.rename(directory)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
