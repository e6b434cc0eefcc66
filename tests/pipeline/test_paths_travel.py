"""A run started in one folder with relative paths resumes, exports and loads from any other.

A user's folder A holds the model (``model.base: model``, relative) and the recipe; the run
trains there with LoRA, resumes from folder B, and from folder C peft loads the adapter by
itself (its base named by an absolute path, no network) and ``scalerl export --merge`` writes a
model that loads with the base gone.
"""

from __future__ import annotations

import json
import shutil

import torch
import yaml

from scalerl.cli import main
from scalerl.runfolder import read_records

RECIPE = """extends: scalerl
model: {base: model, lora: {rank: 2, alpha: 4}}
pipeline: {backend: inprocess, prompts_per_step: 1, generations: 2}
train: {steps: 2, checkpoint_every: 2, cores: 2, max_minutes: null}
eval: {every: 2, num_prompts: 1, k: 1}
sampling: {max_new_tokens: 4}
length: {control: none}
forecast: {enabled: false}
log: {progress: false, tensorboard: false}
"""


def test_a_relative_base_run_resumes_and_exports_from_other_folders(nano_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    a, b, c = (tmp_path / name for name in ("a", "b", "c"))
    for folder in (a, b, c):
        folder.mkdir()
    shutil.copytree(nano_dir, a / "model")
    (a / "run.yaml").write_text(RECIPE)
    run = tmp_path / "runs" / "r"

    monkeypatch.chdir(a)
    assert main(["train", "--recipe", "run.yaml", "--out", str(run), "--no-fit"]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["base"] == str(a.resolve() / "model")
    assert not {"preset", "arch", "sft"} & set(saved["model"])

    monkeypatch.chdir(b)
    assert main(["train", "--resume", str(run), "--set", "train.steps=3", "--no-fit"]) == 0
    assert [r["step"] for r in read_records(run / "metrics.jsonl")] == [0, 1, 2, 3]

    monkeypatch.chdir(c)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    adapter = json.loads((run / "model" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(a.resolve() / "model")
    adapted = AutoPeftModelForCausalLM.from_pretrained(run / "model")
    assert main(["export", str(run), "--out", str(c / "merged"), "--merge"]) == 0
    assert not (c / "merged" / "adapter_config.json").exists()
    shutil.rmtree(a / "model")  # the merged model needs no base
    alone = AutoModelForCausalLM.from_pretrained(c / "merged")
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        assert torch.allclose(alone(ids).logits, adapted(ids).logits, atol=1e-4)
