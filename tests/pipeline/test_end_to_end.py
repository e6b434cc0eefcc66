"""Real training, end to end: the validation pass rate rises; the lag bound holds per token;
every recipe runs; and the metrics file is what ``scalerl fit`` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from glossary import undocumented
from pipeline_helpers import run_overrides

from scalerl.config import load_config, recipe_names
from scalerl.fit.readers import read_curves
from scalerl.pipeline.run import train
from scalerl.runfolder import read_records


def test_training_raises_the_validation_pass_rate(warm_model_dir, tmp_path):
    cfg = load_config("scalerl", run_overrides(
        warm_model_dir, **{"pipeline.backend": "inprocess", "train.steps": 60, "eval.every": 20, "eval.schedule": "every",
                           "eval.num_prompts": 96, "optim.lr": 1e-4, "optim.warmup_steps": 5,
                           "pipeline.prompts_per_step": 8, "pipeline.generations": 8}))
    train(cfg, tmp_path)
    records = read_records(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(61))
    val = [r["val_pass_rate"] for r in records if r.get("val_pass_rate") is not None]
    assert len(val) == 4
    # measured on this setup (train.seed 0-2, an Intel Xeon with AVX-512): R0 0.115-0.148, the later
    # evaluations' mean +0.065 to +0.098. At lr 2e-4 (+0.06 to +0.12 over seeds 0-2 on an AMD EPYC)
    # seed 0 rose only +0.023 there (the reward rose and fell): the smaller rate's rise held on all three
    assert sum(val[1:]) / 3 > val[0] + 0.04 and val[-1] > val[0], val
    curve = read_curves(tmp_path / "metrics.jsonl")[0]  # as `scalerl fit` reads it
    assert list(curve.reward) == val and (curve.compute[1:] > curve.compute[:-1]).all()
    assert records[-1]["flops"] > 0 and records[-1]["compute_gpu_hours"] > 0
    # role times and the learner's utilisation, every step (bounds only: the machine may be busy)
    for r in records[1:]:
        assert r["learner_busy_s"] > 0 and r["learner_wait_s"] >= 0 and r["learner_mfu"] > 0
        assert "mismatch_kl" in r and r["pool_live"] >= 0


def test_local_backend_keeps_every_group_within_the_lag_bound(warm_model_dir, tmp_path):
    k = 2
    cfg = load_config("scalerl", run_overrides(
        warm_model_dir, **{"pipeline.backend": "local", "pipeline.k": k, "train.steps": 8,
                           "eval.every": 100, "eval.schedule": "every", "eval.num_prompts": 2, "eval.k": 1,
                           # a slow learner (one completion per micro-batch) lets the generator run ahead
                           "optim.micro_batch": 1, "pipeline.prompts_per_step": 4,
                           "pipeline.generations": 4, "pipeline.prompts_per_chunk": 2}))
    train(cfg, tmp_path)
    records = [r for r in read_records(tmp_path / "metrics.jsonl") if r["step"] > 0]
    assert len(records) == 8
    seen = {int(s) for r in records for s in r["staleness_hist"]}
    # only the bound: how far ahead the generator actually ran depends on the machine's load
    assert max(seen) <= k
    # the roles' CPU seconds are measured every step (the overlap they achieve is reported
    # after the monitor's warm-up of 8 steps: tests/pipeline/test_overlap.py)
    assert all(r["generator_cpu_s"] > 0 and r["learner_cpu_s"] > 0 for r in records)
    assert all(r["overlap_speedup"] > 0 and r["overlap_bound"] >= 1 for r in records if "overlap_speedup" in r)
    assert all(r["staleness_max"] <= k for r in records)


ENVS = Path(__file__).parents[1] / "rollout" / "envs.py"


def test_a_user_environment_from_a_file_trains_on_the_local_backend(warm_model_dir, tmp_path):
    """Generators (spawned processes) and the evaluating generator load the environment from
    its file; trajectories have turns, observations are out of the loss, nothing fails."""
    cfg = load_config("scalerl", run_overrides(
        warm_model_dir, **{"pipeline.backend": "local", "train.steps": 3, "eval.every": 100, "eval.schedule": "every", "eval.num_prompts": 8,
                           "eval.k": 2, "pipeline.prompts_per_step": 2, "pipeline.generations": 4,
                           "pipeline.prompts_per_chunk": 2, "length.control": "none", "filters.zero_variance": False,
                           "env.name": f"{ENVS}:Scripted", "env.knobs": "{turns: 2, prompt: 'add 1+2 ='}",
                           "env.max_turns": 3, "env.max_tokens": 120}))
    train(cfg, tmp_path)
    records = read_records(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    # step 0 evaluates the starting weights with a fixed seed: the warm model ends its first
    # turn with EOS, the environment answers, and the model takes a second turn
    assert records[0]["val_turns_mean"] > 1 and records[-1]["val_turns_mean"] >= 1
    for r in records[1:]:
        assert r["env_errors"] == 0 and 1 <= r["turns_mean"] <= 3 and r["step_trained_tokens"] > 0
        assert 0 <= r["env_tokens_frac"] < 1 and r["tool_calls_mean"] <= 2
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    multi = [s for s in samples if "turns" in s]
    assert multi and all(t["masked"] == t["tokens"] for s in multi for t in s["turns"] if t["role"] == "env")


@pytest.mark.parametrize("recipe", recipe_names())
def test_every_recipe_runs_a_step(recipe, warm_model_dir, tmp_path):
    cfg = load_config(recipe, run_overrides(
        warm_model_dir, **{"pipeline.backend": "inprocess", "train.steps": 1, "eval.every": 1, "eval.schedule": "every",
                           "eval.num_prompts": 2, "eval.k": 1, "pipeline.prompts_per_step": 2,
                           "pipeline.generations": 4, "pipeline.k": 1}))
    last = train(cfg, tmp_path)
    assert last["step"] == 1 and last["version"] == 1
    assert (tmp_path / "checkpoint" / "meta.json").is_file()
    # each recipe's loss, filters and environment write their own keys: each has its line
    assert undocumented(k for r in read_records(tmp_path / "metrics.jsonl") for k in r) == []


@pytest.mark.parametrize("mode, expected", [("sync", [0] * 6), ("ppo-off-policy", [0, 1, 2] * 2)])
def test_off_policy_modes_have_their_staleness_pattern(mode, expected, warm_model_dir, tmp_path):
    cfg = load_config("scalerl", run_overrides(
        warm_model_dir, **{"pipeline.backend": "inprocess", "pipeline.mode": mode, "pipeline.k": 3,
                           "train.steps": 6, "eval.every": 100, "eval.schedule": "every", "eval.num_prompts": 2, "eval.k": 1,
                           "pipeline.prompts_per_step": 2, "pipeline.generations": 4}))
    train(cfg, tmp_path)
    records = read_records(tmp_path / "metrics.jsonl")[1:]
    # PPO-off-policy-k: k updates on one frozen policy, so the lag cycles 0 … k−1
    assert [r["staleness_max"] for r in records] == expected
