"""A user's instruct model on their own data: chat template, reward file, LoRA, model/ out.

The test builds what a user brings: a local Qwen2-style model directory with a ChatML chat
template (random weights: ``scalerl.models.tiny_chat``), a JSONL of chat-message prompts, and a
reward function in a file of their own. It trains on the ``local`` backend (spawned
generators) and on Ray, resumes, and loads what comes out with transformers and peft.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from pipeline_helpers import run_overrides

from scalerl.cli import main
from scalerl.config import load_config
from scalerl.models.tiny_chat import build_chat_model_dir
from scalerl.pipeline.run import train
from scalerl.runfolder import read_records

REWARD = '''
import os

def score(completion, answer, prompt, **fields):
    with open(os.path.join(os.path.dirname(__file__), "pids.txt"), "a") as f:
        f.write(f"{os.getpid()}\\n")
    return 1.0 if answer in completion else 0.0
'''


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """A user's folder: the instruct model, the data, the reward file."""
    root = tmp_path_factory.mktemp("user")
    build_chat_model_dir(root / "instruct")
    with open(root / "data.jsonl", "w") as f:
        for a in range(10):
            for b in range(4):
                prompt = [{"role": "system", "content": "Answer with the number."},
                          {"role": "user", "content": f"What is {a} add {b}?"}]
                f.write(json.dumps({"prompt": prompt, "answer": str(a + b), "level": 1}) + "\n")
    (root / "reward.py").write_text(REWARD)
    return root


def overrides(user, **extra):
    return run_overrides(user / "instruct", **{
        "task.name": "dataset", "task.knobs": f"{{path: {user / 'data.jsonl'}, num_validation: 8}}",
        "task.reward_fn": f"{user / 'reward.py'}:score",
        "sampling.max_new_tokens": 12, "length.control": "none", "length.truncation": "keep",
        "filters.zero_variance": False, "pipeline.prompts_per_step": 2, "pipeline.generations": 2,
        "pipeline.prompts_per_chunk": 1, "eval.num_prompts": 4, "eval.k": 1, "eval.every": 2, "eval.schedule": "every",
        "train.checkpoint_every": 2, "log.samples": 3, "log.tensorboard": True, "optim.lr": 1e-2,
        **extra})


def generator_pids(user) -> set[int]:
    path = user / "pids.txt"
    return {int(line) for line in path.read_text().split()} if path.exists() else set()


def check_samples(run_dir):
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and {s["step"] for s in samples} >= {0, 2}
    for s in samples:  # the exact rendered text: the template's turn markers, the generation prompt
        assert s["prompt"].startswith("<|im_start|>system\nAnswer with the number.<|im_end|>\n<|im_start|>user\n")
        assert s["prompt"].endswith("<|im_start|>assistant\n")
        assert set(s) >= {"completion", "reward", "finish_reason"}


def test_lora_on_the_local_backend_exports_and_resumes(user, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "run"
    cfg = load_config("scalerl", overrides(user, **{"pipeline.backend": "local", "train.steps": 3,
                                                    "model.lora": "{rank: 4, alpha: 16}"}))
    train(cfg, run)
    check_samples(run)
    assert generator_pids(user) - {os.getpid()}  # the reward function ran in the spawned generators
    base = AutoModelForCausalLM.from_pretrained(user / "instruct")
    adapted = PeftModel.from_pretrained(base, run / "model")
    merged = AutoModelForCausalLM.from_pretrained(run / "model" / "merged")
    tokenizer = AutoTokenizer.from_pretrained(run / "model" / "merged")
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        assert torch.allclose(adapted(ids).logits, merged(ids).logits, atol=1e-4)
    assert merged.generate(ids, max_new_tokens=2, do_sample=False).shape[1] > 3
    # `scalerl export` reads the run without changing it: the merged weights alone, in bf16
    assert main(["export", str(run), "--out", str(tmp_path / "merged"), "--merge", "--dtype", "bfloat16"]) == 0
    alone = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype="auto")
    assert alone.dtype == torch.bfloat16 and not (tmp_path / "merged" / "adapter_config.json").exists()
    with torch.no_grad():
        assert torch.allclose(alone(ids).logits.float(), merged(ids).logits, atol=0.1)
    # resume from the step-3 checkpoint and go on: no step lost, none repeated
    cfg = load_config(run / "config.yaml", ["train.steps=5"])
    train(cfg, run, resume=True)
    assert [r["step"] for r in read_records(run / "metrics.jsonl")] == list(range(6))
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == 5


PARTIAL = '''
import re

def score(completion, answer, **fields):
    """As the newcomer trial's: 1 for the right number first, 0.2 of credit for any answer."""
    numbers = re.findall(r"-?\\d+", completion)
    return 1.0 if numbers and numbers[0] == answer else 0.2 if completion.strip() else 0.0
'''


def test_a_partial_credit_reward_is_logged_as_returned_and_does_not_pass_as_a_pass(user, tmp_path):
    """The issue-29 trial: a reward in [0, 1] with partial credit on an untrained chat model.
    The logged reward stays in [0, 1] (no silent 2r − 1, no −1 for a cut completion) and the
    validation pass rate counts full marks only, so an untrained model does not read ~1."""
    (tmp_path / "partial.py").write_text(PARTIAL)
    cfg = load_config("scalerl", overrides(user, **{
        "task.reward_fn": f"{tmp_path / 'partial.py'}:score", "pipeline.backend": "inprocess", "train.steps": 2,
        "eval.every": 2, "eval.schedule": "every", "sampling.max_new_tokens": 6}))
    said: list[str] = []
    train(cfg, tmp_path / "run", log=said.append)
    assert any("the loss trains on r as returned (task.reward=as_is from auto)" in line for line in said)
    records = read_records(tmp_path / "run" / "metrics.jsonl")
    trained = [r for r in records if "reward_mean" in r]
    assert trained and all(0.0 <= r["reward_mean"] <= 1.0 for r in trained)
    assert all(r["trained_reward_mean"] == pytest.approx(r["reward_mean"]) for r in trained)
    evaluations = [r for r in records if r.get("val_pass_rate") is not None]
    first = evaluations[0]
    assert 0.0 <= first["val_reward_mean"] <= 1.0 and first["val_reward_stderr"] >= 0.0
    # nearly every answer earns credit (counted as passes before: val_pass_rate ~1), but a pass
    # is the right number first: an untrained model is far from 1
    assert first["val_reward_mean"] >= 0.1 and first["val_pass_rate"] <= 0.5


def test_full_fine_tuning_exports_a_changed_model(user, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = load_config("scalerl", overrides(user, **{"pipeline.backend": "local", "train.steps": 2}))
    train(cfg, tmp_path)
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "model").state_dict()
    start = AutoModelForCausalLM.from_pretrained(user / "instruct").state_dict()
    moved = [name for name in start if not torch.equal(start[name], trained[name])]
    assert len(moved) > len(start) // 2  # the learner's weights, not the starting ones


@pytest.mark.serial  # starts Ray: make test runs it after the parallel part
def test_lora_on_ray(user, tmp_path):
    ray = pytest.importorskip("ray")
    before = generator_pids(user)
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    try:
        cfg = load_config("scalerl", overrides(user, **{"pipeline.backend": "ray", "train.steps": 2,
                                                        "model.lora": "{rank: 4}"}))
        train(cfg, tmp_path)
    finally:
        ray.shutdown()
    check_samples(tmp_path)
    assert generator_pids(user) - before - {os.getpid()}  # scored inside the Ray actors
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(user / "instruct"), tmp_path / "model")
    assert adapted.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=2, do_sample=False).shape[1] > 3


def test_export_of_what_is_not_a_run_is_one_sentence(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("name: x\n")
    for folder, words in ((tmp_path / "nowhere", "is not a run directory"), (tmp_path, "holds no config.json")):
        assert main(["export", str(folder)]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("case", ["no file", "no name", "no completion", "missing field", "bad prompt",
                                  "no template", "rank 0", "fields not taken", "TRL form, fields not taken",
                                  "messages deep in the file", "a named column some rows lack",
                                  "a named column no row has",
                                  "lora targets none", "lora target a typo", "lora target the head",
                                  "lora rank above the layers"])
def test_bad_input_is_one_sentence(case, user, tmp_path, capsys, nano_dir):
    (tmp_path / "r.py").write_text("def other(text):\n    return 0.0\n"
                                   "def narrow(completion, answer):\n    return 0.0\n"
                                   "def trl_narrow(prompts, completions, answer):\n    return [0.0]\n")
    data = tmp_path / "d.jsonl"
    sets = {"model.base": str(user / "instruct"), "task.name": "dataset",
            "task.knobs": f"{{path: {user / 'data.jsonl'}}}", "task.reward_fn": f"{user / 'reward.py'}:score"}
    if case.startswith("TRL"):  # reward_fns instead of reward_fn
        del sets["task.reward_fn"]
    words = {"no file": ("task.reward_fn", f"{tmp_path}/nope.py:score", "does not exist"),
             "no name": ("task.reward_fn", f"{tmp_path}/r.py:score", "there is no 'score'"),
             "no completion": ("task.reward_fn", f"{tmp_path}/r.py:other", "takes no 'completion' parameter"),
             "missing field": ("task.knobs", f"{{path: {data}}}", f"{data}:2: missing field 'prompt'"),
             "bad prompt": ("task.knobs", f"{{path: {data}}}", f"{data}:1: field 'prompt': the prompt is neither"),
             "no template": ("model.base", str(nano_dir), "need a chat template"),
             "rank 0": ("model.lora.rank", "0", "model.lora.rank"),
             # LoRA the model cannot take: refused at preflight, listing the layers it has
             "lora targets none": ("model.lora", "{targets: []}", "model.lora.targets is empty"),
             "lora target a typo": ("model.lora", "{targets: [q_proj, nonexistent]}",
                                    "'nonexistent', which is no linear layer of model.base"),
             "lora target the head": ("model.lora", "{targets: [lm_head]}", "names lm_head, the LM head of"),
             "lora rank above the layers": ("model.lora", "{rank: 100000}", "model.lora.rank 100000 is more than"),
             # the data has a `level` column and every call gets `prompt`: a narrow signature fails
             "fields not taken": ("task.reward_fn", f"{tmp_path}/r.py:narrow", "cannot be called as NAME(completion"),
             "TRL form, fields not taken": ("task.reward_fns", f"[{tmp_path}/r.py:trl_narrow]",
                                            "cannot be called as NAME(prompts, completions"),
             "messages deep in the file": ("task.knobs", f"{{path: {data}, num_validation: 1}}",
                                           "is chat messages, which need a chat template"),
             # reward.py's score names `answer`: a row without it would score None silently (newcomer F3)
             "a named column some rows lack": ("task.knobs", f"{{path: {data}, num_validation: 1}}",
                                               f"{data}:3: the row has no column 'answer', which task.reward_fn"),
             "a named column no row has": ("task.knobs", f"{{path: {data}, num_validation: 1}}",
                                           "the row has no column 'answer', which task.reward_fn")}[case]
    lines = {"bad prompt": ['{"prompt": 5}'],
             "messages deep in the file": [*(f'{{"prompt": "p{i}"}}' for i in range(6)),
                                           '{"prompt": [{"role": "user", "content": "m"}]}'],
             "a named column some rows lack": [*(f'{{"prompt": "p{i}", "answer": "{i}"}}' for i in range(2)),
                                               '{"prompt": "p2", "level": 3}',
                                               *(f'{{"prompt": "p{i}", "answer": "{i}"}}' for i in range(3, 6))],
             "a named column no row has": [f'{{"prompt": "p{i}"}}' for i in range(6)]}
    data.write_text("\n".join(lines.get(case, ['{"prompt": "a"}', '{"answer": "b"}'])) + "\n")
    if case == "messages deep in the file":
        sets["model.base"] = str(nano_dir)
    sets[words[0]] = words[1]
    rc = main(["train", "--out", str(tmp_path / "run"), *(f"--set={k}={v}" for k, v in sets.items())])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err and words[2] in err, err
    assert not (tmp_path / "run").exists()
