"""RUN_DIR/model: a Hugging Face directory that transformers loads, in the dtype asked for."""

import pytest
import torch

from scalerl.models.export import write_model_dir
from scalerl.models.load import load_pretrained, load_tokenizer
from scalerl.models.tiny_chat import build_chat_model_dir


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat_model_dir(tmp_path_factory.mktemp("chat") / "model")


def test_export_loads_with_auto_classes(chat_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model, tokenizer = load_pretrained(chat_dir)
    state = {k: v + 0.5 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    out = write_model_dir(tmp_path / "model", model, tokenizer, state=state)
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert loaded.dtype == torch.float32
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, state[name]), name  # the given state, not the live model's
    assert AutoTokenizer.from_pretrained(out).chat_template == tokenizer.chat_template
    assert GenerationConfig.from_pretrained(out).eos_token_id == model.generation_config.eos_token_id
    ids = torch.tensor([tokenizer.encode("add 1 2")])
    assert loaded.generate(ids, max_new_tokens=3, do_sample=False).shape[1] >= ids.shape[1] + 1


def test_export_dtype_template_and_replacement(chat_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_pretrained(chat_dir)
    out = write_model_dir(tmp_path / "model", model, tokenizer, dtype="bfloat16", chat_template="{{ 'X' }}")
    assert AutoModelForCausalLM.from_pretrained(out, dtype="auto").dtype == torch.bfloat16
    assert load_tokenizer(out).chat_template == "{{ 'X' }}"
    assert tokenizer.chat_template != "{{ 'X' }}"  # the live tokenizer is left as it was
    assert model.dtype == torch.float32
    (out / "stale.txt").write_text("from the previous export")
    write_model_dir(out, model, tokenizer)
    assert not (out / "stale.txt").exists()  # replaced whole, not written over
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary left beside it


def test_a_failed_swap_puts_the_old_folder_back_and_never_hides_a_file(chat_dir, tmp_path, monkeypatch):
    from pathlib import Path

    model, tokenizer = load_pretrained(chat_dir)
    out = write_model_dir(tmp_path / "model", model, tokenizer)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    real_rename = Path.rename

    def rename(self, target):  # the second rename (the new folder into place) fails
        if self.name.startswith(".model.tmp-"):
            raise OSError(28, "No space left on device")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError):
        write_model_dir(out, model, tokenizer, dtype="bfloat16")
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # the old one, back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    (tmp_path / "notes.txt").write_text("a user's file")
    with pytest.raises(FileExistsError):
        write_model_dir(tmp_path / "notes.txt", model, tokenizer)
    assert (tmp_path / "notes.txt").read_text() == "a user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "notes.txt"]


def test_an_adapter_names_a_base_loaded_by_a_relative_path_absolutely(chat_dir, tmp_path, monkeypatch):
    import json

    from scalerl.models.lora import LoraSpec, apply_lora

    monkeypatch.chdir(chat_dir.parent)
    model, tokenizer = load_pretrained(chat_dir.name)  # a built run's RUN_DIR/base_model, run from a folder
    out = write_model_dir(tmp_path / "model", apply_lora(model, LoraSpec(2, 4.0, 0.0, ("q_proj",))), tokenizer)
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(chat_dir.resolve())


@pytest.mark.parametrize("arch, dtype", [("gpt2", "float32"), ("llama", "bfloat16"), ("qwen2", "float32")])
def test_tied_weights_are_written_once(decoder_dirs, arch, dtype, tmp_path):
    """A head tied to the embedding (GPT-2's and this Llama's; not this Qwen2's) is written once,
    as ``save_pretrained`` writes the model's own weights, from a state holding a tensor per
    name (as a checkpoint read back does) in any dtype; it reloads tied, with the same logits."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_pretrained(decoder_dirs[arch])
    state = {k: v.clone() + 0.01 for k, v in model.state_dict().items()}  # trained: not the live weights
    out = write_model_dir(tmp_path / "model", model, tokenizer, state=state, dtype=dtype)
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    own = tmp_path / "own"
    model.save_pretrained(own)
    with safe_open(str(own / "model.safetensors"), framework="pt") as f:
        assert names == set(f.keys())  # transformers' own choice of names
    tied = model.config.tie_word_embeddings
    assert ("lm_head.weight" in names) != tied
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype="auto")
    assert (loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight) == tied
    model.load_state_dict({k: v.to(loaded.dtype).to(v.dtype) for k, v in state.items()})  # what was written
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits.float(), model.to(loaded.dtype)(ids).logits.float())
