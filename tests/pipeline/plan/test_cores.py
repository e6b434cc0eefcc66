"""The rule that splits a run's cores between its roles (``scalerl.pipeline.plan.cores``)."""

from __future__ import annotations

import pytest

from scalerl.config import load_config
from scalerl.experiments.runners import auto_parallel, need, with_cores
from scalerl.pipeline.plan import build_plan
from scalerl.pipeline.plan.cores import split_cores


@pytest.mark.parametrize(("cores", "generators", "learner"), [(1, 1, 1), (2, 1, 1), (3, 1, 2), (4, 2, 2), (16, 8, 8)])
def test_auto_gives_half_the_cores_to_one_thread_generators_and_the_rest_to_the_learner(cores, generators, learner):
    split = split_cores("processes", cores)
    assert (split.generators, split.generator_threads, split.learner_threads) == (generators, 1, learner)
    assert split.rule.startswith(f"cores: {cores} -> learner {learner} thread(s) + {generators} generator(s)")
    assert "auto: generators, generator threads, learner threads" in split.rule


def test_numbers_the_config_sets_are_kept_and_the_rule_fills_in_the_rest():
    split = split_cores("processes", 8, generators=2, generator_threads=2)
    assert (split.generators, split.generator_threads, split.learner_threads) == (2, 2, 4)
    assert "auto: learner threads" in split.rule
    assert "all set by the config" in split_cores("processes", 8, 3, 1, 2).rule
    one = split_cores("in_learner", 4)  # both roles share one process: the learner takes every core
    assert (one.generators, one.learner_threads) == (1, 4) and "in the learner's process" in one.rule
    assert split_cores("cluster", 8).generators == 1
    # CUDA or vLLM generators each hold a model copy on the device: one unless asked
    gpu = split_cores("processes", 16, accelerated=True)
    assert (gpu.generators, gpu.learner_threads) == (1, 15)


def test_the_config_reaches_the_split_and_a_sweep_shares_the_cores_between_its_points():
    cfg = load_config("scalerl", ["train.cores=6", "pipeline.generator_threads=1"])
    plan = build_plan(cfg)
    assert (plan.generators, plan.learner_threads, plan.cores) == (3, 3, 6) and plan.rule.startswith("cores: 6 ->")
    auto = load_config("scalerl")
    assert need(auto) == 2 and auto_parallel([auto], cores=8) == 4 and auto_parallel([auto], cores=3) == 1
    assert with_cores(auto, 4).train.cores == 4 and with_cores(cfg, 4).train.cores == 6  # its own setting wins
    fixed = load_config("scalerl", ["pipeline.num_generators=3", "train.threads=2"])
    assert need(fixed) == 5 and auto_parallel([fixed], cores=16) == 3
    assert need(load_config("scalerl", ["pipeline.backend=inprocess"])) == 1
