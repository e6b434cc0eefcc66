"""The generator role: waits for the assigned weights, swaps newer ones in between decode steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scalerl.pipeline.generators.actor import Actor
from scalerl.pipeline.weights import InProcessWeights, SharedWeights, WeightLayout, model_buckets
from scalerl.types import Completion, PromptAssignment, SamplingParams


class StepEngine:
    """Decodes 4 steps; every token records the version loaded when it was produced."""

    def __init__(self):
        self.version, self.loaded = -1, []

    def update_weights(self, state_dict, version):
        self.loaded.append(version)
        self.version = version

    def generate(self, prompts, params, on_step=None):
        versions = []
        for step in range(4):
            if on_step is not None:
                on_step(self, step)
            versions.append(self.version)
        v = np.array(versions, dtype=np.int64)
        return [Completion(np.array(p), np.arange(4), np.zeros(4, np.float32), v.copy(),
                           np.ones(4, bool), "stop", text="1") for p in prompts]


class PublishAfterTwoReads:
    """A weight channel on which the learner publishes version 1 after the generator's second
    poll: the first poll is the pre-batch wait, the second is decode step 0."""

    def __init__(self):
        self.reads = 0

    def version(self):
        return 0 if self.reads < 3 else 1

    def read(self, since):
        self.reads += 1
        latest = self.version()
        return (latest, {}) if latest > since else None


class OneTask:
    def train_example(self, i):
        return i

    def prompt(self, example):
        return f"p{example}"

    def reward(self, text, example):
        return float(text == "1")


class Tokenizer:
    def encode(self, text):
        return [ord(c) for c in text]


def test_weights_published_mid_generation_are_swapped_in_flight():
    engine = StepEngine()
    actor = Actor(engine, Tokenizer(), OneTask(), SamplingParams(), generations=2, weights=PublishAfterTwoReads())
    groups = actor.run_batch([PromptAssignment(seq=1, prompt_id=0, epoch=0, min_version=0)])
    # poll 1 (the wait) loads v0; poll 2 (step 0) finds nothing newer; poll 3 (step 1) loads v1
    assert engine.loaded == [0, 1] and actor.swaps == 1
    versions = groups[0].completions[0].versions.tolist()
    assert versions == [0, 1, 1, 1]
    assert groups[0].oldest_version == 0 and groups[0].seq == 1
    assert groups[0].rewards.tolist() == [1.0, 1.0]  # ±1 form of a correct answer


def test_wait_for_version_gives_up_when_the_learner_is_gone():
    actor = Actor(StepEngine(), Tokenizer(), OneTask(), SamplingParams(), 2, weights=InProcessWeights(),
                  orphaned=lambda: True)
    with pytest.raises(TimeoutError):
        actor.wait_for_version(3)


def test_shared_weights_round_trip_and_versions():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    shared = SharedWeights(WeightLayout(model), torch.multiprocessing.get_context("spawn"))
    assert shared.version() == -1 and shared.read(-1) is None
    shared.write(4, model_buckets(model))
    version, state = shared.read(since=3)
    assert version == 4 and shared.read(since=4) is None
    for name, p in model.named_parameters():
        assert torch.equal(state[name], p.detach())


class JunkCountingTask(OneTask):
    """A task whose grader met a malformed result for every completion that is not "1"."""

    reward_errors = 0

    def reward(self, text, example):
        self.reward_errors += text != "1"
        return 0.0


def test_samples_the_task_could_not_grade_reach_the_step_metrics():
    import dataclasses

    from scalerl.pipeline.steps import generator_times

    engine, honest = StepEngine(), StepEngine()
    engine.version = honest.version = 0  # a frozen policy: no weights to wait for
    engine.generate = lambda prompts, params, on_step=None: [
        dataclasses.replace(c, text="junk") for c in StepEngine.generate(engine, prompts, params, on_step)]
    actor = Actor(engine, Tokenizer(), JunkCountingTask(), SamplingParams(), generations=3)
    groups = actor.run_batch([PromptAssignment(seq=s, prompt_id=0, epoch=0, min_version=0) for s in (1, 2)])
    assert [g.reward_errors for g in groups] == [3, 3]
    assert generator_times(groups)["reward_errors"] == 6
    assert generator_times(Actor(honest, Tokenizer(), OneTask(), SamplingParams(), 2).run_batch(
        [PromptAssignment(seq=1, prompt_id=0, epoch=0, min_version=0)]))["reward_errors"] == 0
