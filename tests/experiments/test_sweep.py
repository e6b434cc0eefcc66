"""The sweep runner: planning, skip/resume bookkeeping, shared starting model (no real training)."""

from __future__ import annotations

import json

import pytest

from scalerl.config import ConfigError
from scalerl.experiments.sweep import base_key, is_finished, loo_recipes, plan, run_sweep

FAST = ["model.base=/nonexistent/model", "train.steps=3"]  # model.base set: no SFT warm-up


def _fake_train(calls):
    """Stand-in for ``pipeline.run.train``: records the call and writes steps 0..N."""

    def train(cfg, run_dir, *, resume=False, log=print):
        calls.append((cfg.name, cfg.train.seed, resume))
        run_dir.mkdir(parents=True, exist_ok=True)
        with (run_dir / "metrics.jsonl").open("a") as f:
            for step in range(cfg.train.steps + 1):
                f.write(json.dumps({"step": step}) + "\n")

    return train


def test_loo_recipes_start_with_the_baseline():
    names = loo_recipes()
    assert names[0] == "scalerl" and "loo-dapo" in names and "loo-8op" in names
    assert all(n == "scalerl" or n.startswith("loo-") for n in names)


def test_plan_is_one_validated_variant_per_recipe_and_seed(tmp_path):
    variants = plan(["scalerl", "loo-dapo"], [0, 1], FAST, tmp_path)
    assert [(v.recipe, v.seed) for v in variants] == [("scalerl", 0), ("scalerl", 1), ("loo-dapo", 0), ("loo-dapo", 1)]
    assert variants[3].run_dir == tmp_path / "loo-dapo" / "seed1"
    assert variants[3].config.loss.name == "dapo" and variants[3].config.train.seed == 1


def test_plan_rejects_bad_input_before_training(tmp_path):
    with pytest.raises(ConfigError, match="optim.lrr"):
        plan(["scalerl"], [0], ["optim.lrr=1"], tmp_path)
    with pytest.raises(ConfigError, match="repeat"):
        plan(["scalerl", "scalerl"], [0], FAST, tmp_path)
    with pytest.raises(ConfigError, match="no recipes"):
        plan([], [0], FAST, tmp_path)
    with pytest.raises(ConfigError, match=r"seeds repeat in \[0, 0\]"):
        plan(["scalerl"], [0, 0], FAST, tmp_path)
    with pytest.raises(ConfigError, match="repeat"):  # both would train into OUT/scalerl
        plan(["scalerl", str(tmp_path / "scalerl.yaml")], [0], FAST, tmp_path)


def test_a_run_the_forecast_stopped_early_counts_as_finished(tmp_path):
    (variant,) = plan(["scalerl"], [0], FAST, tmp_path)
    variant.run_dir.mkdir(parents=True)
    (variant.run_dir / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1, "stopped_early": "stopping early"}\n')
    assert is_finished(variant.run_dir, variant.config)
    calls = []
    run_sweep([variant], tmp_path, train=_fake_train(calls), log=lambda *_: None)
    assert calls == []  # a rerun does not undo the forecast's decision


def test_finished_variants_are_skipped_on_rerun(tmp_path):
    variants = plan(["scalerl", "loo-dapo"], [0], FAST, tmp_path)
    calls = []
    run_sweep(variants, tmp_path, train=_fake_train(calls), log=lambda *_: None)
    assert calls == [("scalerl", 0, False), ("loo-dapo", 0, False)]
    assert all(is_finished(v.run_dir, v.config) for v in variants)
    run_sweep(variants, tmp_path, train=_fake_train(calls), log=lambda *_: None)
    assert len(calls) == 2  # nothing trained twice


def test_a_run_killed_before_any_checkpoint_restarts_and_keeps_its_records(tmp_path):
    (variant,) = plan(["scalerl"], [0], FAST, tmp_path)
    variant.run_dir.mkdir(parents=True)
    (variant.run_dir / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    calls = []
    run_sweep([variant], tmp_path, train=_fake_train(calls), log=lambda *_: None)
    assert calls == [("scalerl", 0, False)]
    assert (variant.run_dir / "metrics.before-restart.jsonl").read_text() == '{"step": 0}\n{"step": 1}\n'
    steps = [json.loads(line)["step"] for line in (variant.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]


def test_loo_variants_share_the_starting_model_but_seeds_do_not(tmp_path):
    s0, s1, dapo0 = plan(["scalerl", "loo-dapo"], [0, 1], [], tmp_path)[:3]
    assert base_key(s0.config) == base_key(dapo0.config)  # the loss does not touch the weights
    assert base_key(s0.config) != base_key(s1.config)
