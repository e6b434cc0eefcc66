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
  it; its ``base_model_name_or_path`` is absolute, so ``AutoPeftModelForCausalLM`` finds the
  base from any folder), and ``merged/`` inside it the merged weights with the tokenizer: a
  complete model.
- Weights the model ties (the LM head to the embedding, ``config.tie_word_embeddings``) are
  written once, under the name ``save_pretrained`` keeps (:func:`untied_state`).
- The directory is written beside ``model/`` under a temporary name and swapped in by two
  renames, so a reader (or a kill) never sees half of one: at worst, between the renames,
  none (and the next export writes it again). A write that fails (a full disk) removes the
  temporary and any parent folder it made, and leaves what was there as it was; a file is
  never renamed away (only a folder is replaced).
- ``scalerl export`` also writes ``scalerl-export.json`` (:data:`EXPORT_MARKER`): the run it
  came from and the entries it wrote, so a later export recognises its own output and
  replaces only that (``scalerl.pipeline.commands.export_target``).
"""

from __future__ import annotations

import errno
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from scalerl.models.load import resolve_dtype
from scalerl.models.lora import PEFT_PREFIX, merged_weights

EXPORT_MARKER = "scalerl-export.json"
"""Written by ``scalerl export`` into the folder it exports to: ``{"run", "step", "files"}``."""


def cast_state(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` on the CPU with its floating tensors in ``dtype``."""
    return {k: v.detach().to("cpu", dtype=dtype if v.is_floating_point() else v.dtype) for k, v in state.items()}


def untied_state(model, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` without the names under which ``model`` holds a parameter it already holds
    under an earlier one (``lm_head.weight``, the embedding when the config ties them): each
    tensor is written once, as ``save_pretrained`` writes a model's own weights, and
    ``from_pretrained`` ties them back. A given ``state`` is cast tensor by tensor, so
    ``save_pretrained`` no longer sees the two names share one tensor and would write both."""
    first: dict[int, str] = {}
    aliases = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if first.setdefault(id(param), name) != name and first[id(param)] in state:
            aliases.add(name)
    return {k: v for k, v in state.items() if k not in aliases}


def _save_full(model, state: Mapping[str, torch.Tensor], dtype: torch.dtype, directory: Path) -> None:
    """``model``'s config and generation config with ``state``'s weights in ``dtype``, tied
    ones once."""
    model.save_pretrained(directory, state_dict=untied_state(model, cast_state(state, dtype)))
    set_config_dtype(directory, dtype)


def set_config_dtype(directory: Path, dtype: torch.dtype) -> None:
    """``config.json``'s ``dtype``: ``save_pretrained`` writes the live parameters' dtype, and
    ``from_pretrained(dtype="auto")`` reads this field back, so it must say what was saved."""
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config["dtype"] = str(dtype).removeprefix("torch.")
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def write_model_dir(directory: str | Path, model, tokenizer, *, state: Mapping[str, torch.Tensor] | None = None,
                    dtype: str = "float32", chat_template: str | None = None,
                    provenance: Mapping[str, object] | None = None) -> Path:
    """Write ``model`` (with the weights ``state``, default its own) and ``tokenizer`` to
    ``directory``, replacing the folder there atomically. ``chat_template`` (a template's text)
    is saved with the tokenizer when the run rendered prompts with a template of its own;
    ``provenance`` (where the weights came from) goes into :data:`EXPORT_MARKER` with the
    names of the entries written, so a later export can tell its own folder from a user's.

    A peft model writes its adapter at the top and the merged model in ``merged/``. On any
    failure nothing new is left behind and what ``directory`` held is unchanged."""
    directory = Path(directory)
    made = _make_parents(directory.parent)
    target = resolve_dtype(dtype)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
        _write_into(tmp, model, tokenizer, model.state_dict() if state is None else state, target, chat_template)
        if provenance is not None:
            files = sorted([p.name for p in tmp.iterdir()] + [EXPORT_MARKER])
            (tmp / EXPORT_MARKER).write_text(json.dumps({**provenance, "files": files}, indent=1) + "\n")
        _swap_in(tmp, directory)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in made:  # deepest first; only the ones this call made, and only if empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return directory


def _write_into(tmp: Path, model, tokenizer, state: Mapping[str, torch.Tensor], target: torch.dtype,
                chat_template: str | None) -> None:
    """The weights, configs and tokenizer into the fresh folder ``tmp``; the live tokenizer's
    template is put back, since the caller goes on using it."""
    saved_template = tokenizer.chat_template
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    try:
        if hasattr(model, "peft_config"):
            save_adapter_and_merged(model, state, target, tmp, lambda d: tokenizer.save_pretrained(d))
            absolute_base(tmp)
        else:
            _save_full(model, state, target, tmp)
        tokenizer.save_pretrained(tmp)
    finally:
        tokenizer.chat_template = saved_template


def absolute_base(directory: Path) -> None:
    """``adapter_config.json``'s ``base_model_name_or_path`` as an absolute path when it names
    a local folder by a relative one (peft writes the path the base was loaded by), so that
    ``AutoPeftModelForCausalLM.from_pretrained`` finds the base from any folder instead of
    asking the Hub for a model of that name."""
    path = directory / "adapter_config.json"
    config = json.loads(path.read_text())
    base = config.get("base_model_name_or_path")
    if isinstance(base, str) and base and not Path(base).is_absolute() and Path(base).is_dir():
        config["base_model_name_or_path"] = str(Path(base).resolve())
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _make_parents(parent: Path) -> list[Path]:
    """Create ``parent`` and its missing ancestors; the ones made, deepest first, so that a
    failed export can remove them again and leave nothing behind."""
    missing = []
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    made = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
    except BaseException:
        for folder in reversed(made):
            folder.rmdir()
        raise
    return missing


def _swap_in(tmp: Path, directory: Path) -> None:
    """Replace ``directory`` by ``tmp``: the old folder is renamed away first, put back if the
    second rename fails, and removed last. Anything but a folder there is refused, never
    renamed away (a user's file would survive only under a hidden name)."""
    old = None
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise FileExistsError(errno.EEXIST, "not a folder, so an export does not replace it", str(directory))
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        old.rmdir()
        directory.rename(old)
    try:
        tmp.rename(directory)
    except BaseException:
        if old is not None:
            old.rename(directory)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_adapter_and_merged(model, state: Mapping[str, torch.Tensor], dtype: torch.dtype, directory: Path,
                            save_tokenizer: Callable[[Path], None]) -> None:
    """The adapter (``PeftModel.from_pretrained`` loads it) in ``directory``, and the merged
    model (``AutoModelForCausalLM`` loads it), with the tokenizer, in ``directory/merged``:
    each layer merged as peft merges it (its own ``fan_in_fan_out``), tied weights written once."""
    from peft import get_peft_model_state_dict

    cast = cast_state(state, dtype)
    model.save_pretrained(directory, state_dict=get_peft_model_state_dict(model, state_dict=cast))
    plain = {}
    for name, value in cast.items():
        if ".lora_" in name:
            continue
        plain[name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")] = value
    adapters = {k: v for k, v in cast.items() if ".lora_" in k}
    config = next(iter(model.peft_config.values()))
    transposed = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                  if hasattr(module, "lora_A") and getattr(module, "fan_in_fan_out", False)}
    plain |= merged_weights(adapters, plain, config.lora_alpha / config.r, fan_in_fan_out=transposed)
    merged = directory / "merged"
    base = model.get_base_model()
    base.save_pretrained(merged, state_dict=untied_state(base, plain))
    set_config_dtype(merged, dtype)
    save_tokenizer(merged)
