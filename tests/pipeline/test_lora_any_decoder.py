"""LoRA on any decoder: a GPT-2 model directory (transformers ``Conv1D`` layers, weights stored
``(in, out)``) trains with the targets found in its decoder blocks, its generators sample with
the learner's weights, and what comes out reloads with peft and transformers."""

from __future__ import annotations

import json

import torch
from pipeline_helpers import run_overrides

from scalerl.cli import main
from scalerl.config import load_config
from scalerl.pipeline.run import train
from scalerl.runfolder import read_records

# alternating rewards: every group has a variance to learn from, whatever the random model says
REWARD = "import itertools\n_count = itertools.count()\n\n\ndef score(completion, **fields):\n" \
         "    return float(next(_count) % 2)\n"
GPT2_TARGETS = ("c_attn", "c_proj", "c_fc")


def test_lora_on_gpt2_with_the_targets_found_in_the_model(decoder_dirs, tmp_path, capsys):
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    (tmp_path / "reward.py").write_text(REWARD)
    run = tmp_path / "run"
    cfg = load_config("scalerl", run_overrides(decoder_dirs["gpt2"], **{
        "model.lora": "{rank: 4}", "task.reward_fn": f"{tmp_path / 'reward.py'}:score", "optim.lr": 1e-2,
        "pipeline.backend": "inprocess", "pipeline.mode": "sync", "train.steps": 2, "pipeline.prompts_per_step": 2,
        "pipeline.generations": 4, "sampling.max_new_tokens": 12, "length.control": "none",
        "length.truncation": "keep", "filters.zero_variance": False, "eval.num_prompts": 2, "eval.k": 1}))
    train(cfg, run)
    assert "LoRA rank 4 on c_attn, c_proj, c_fc (auto" in capsys.readouterr().out
    records = read_records(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2] and records[1]["grad_norm"] > 0  # the adapters moved
    # step 2 sampled with version 1, merged into the generator's Conv1D weights: the learner's log-probs
    assert records[2]["staleness_max"] == 0 and records[2]["mismatch_logp_abs_max"] < 1e-4
    adapter = json.loads((run / "model" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == set(GPT2_TARGETS) and adapter["fan_in_fan_out"]

    ids = torch.tensor([[5, 6, 7, 8]])
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(decoder_dirs["gpt2"]), run / "model")
    merged = AutoModelForCausalLM.from_pretrained(run / "model" / "merged")
    assert main(["export", str(run), "--out", str(tmp_path / "alone"), "--merge"]) == 0
    alone = AutoModelForCausalLM.from_pretrained(tmp_path / "alone")
    with torch.no_grad():
        want = peft(ids).logits
        assert (want - AutoModelForCausalLM.from_pretrained(decoder_dirs["gpt2"])(ids).logits).abs().max() > 1e-4
        for model in (merged, alone):
            assert (model(ids).logits - want).abs().max() < 1e-5
        greedy = [m.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0) for m in (peft, merged, alone)]
    assert torch.equal(greedy[0], greedy[1]) and torch.equal(greedy[0], greedy[2])
    for folder in (run / "model" / "merged", tmp_path / "alone"):  # the tied head written once
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            assert "transformer.wte.weight" in f.keys() and "lm_head.weight" not in f.keys()


def test_targets_gpt2_lacks_are_one_sentence_before_the_run_folder(decoder_dirs, tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(["train", "--out", str(run), f"--set=model.base={decoder_dirs['gpt2']}",
               "--set=model.lora={targets: [q_proj, v_proj]}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err, err
    assert ("model.lora.targets names 'q_proj', 'v_proj', which are no linear layers of model.base "
            f"{decoder_dirs['gpt2']}; its linear layers are c_attn, c_proj, c_fc") in err, err
    assert not run.exists()
