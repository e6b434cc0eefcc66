"""validate(): mean@k over held-out prompts, per-prompt pass rates, truncation, length."""

import numpy as np
import pytest

from scalerl.data.tasks.base import Example
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.rollout.validate import validate
from scalerl.types import SamplingParams

from .tiny import make_model, with_head_bias


class WordTask:
    """Prompt ``w<id> w<id+1>``; correct when the completion contains the word ``target``."""

    name = "word"

    def __init__(self, n: int, target=None, always=None):
        self.examples = [Example(id=i, problem=f"w{i} w{i + 1}", answer="") for i in range(n)]
        self.target, self.always = target, always

    def validation(self):
        return self.examples

    def prompt(self, example):
        return example.problem

    def reward(self, text, example):
        if self.always is not None:
            return self.always(example)
        return float(self.target in text.split())


def test_pass_rates_are_prompt_major_fractions(model, tokenizer):
    engine = TorchEngine(model, tokenizer)
    params = SamplingParams(max_new_tokens=8, seed=3)
    result = validate(engine, WordTask(3, always=lambda ex: float(ex.id == 0)), params=params, k=4)
    np.testing.assert_array_equal(result.pass_rates, [1.0, 0.0, 0.0])
    assert result.mean_at_k == pytest.approx(1 / 3) and result.num_samples == 12
    # A content-dependent reward: recount it from the same (seeded) samples by hand.
    task = WordTask(3, target="w7")
    result = validate(engine, task, params=params, k=4, num_prompts=2)
    flat = [tokenizer.encode(ex.problem) for ex in task.examples[:2] for _ in range(4)]
    hits = ["w7" in c.text.split() for c in engine.generate(flat, params)]
    np.testing.assert_array_equal(result.pass_rates, [np.mean(hits[:4]), np.mean(hits[4:])])


def test_truncation_rate_and_mean_length(tokenizer):
    model = with_head_bias(make_model(tied=False), {1: -1e4})  # EOS impossible: all cut
    engine = TorchEngine(model, tokenizer)
    result = validate(engine, WordTask(2, target="w1"), params=SamplingParams(max_new_tokens=6, seed=0), k=2)
    assert result.truncation_rate == 1.0 and result.mean_length == 6.0


def test_a_graded_reward_passes_at_the_threshold_and_its_mean_is_measured(model, tokenizer):
    """Prompt 0 scores 0.2 (partial credit), prompt 1 scores 1.0, prompt 2 scores 0.6: by hand,
    with the default threshold 1 the pass rates are (0, 1, 0), mean 1/3; at 0.5 they are (0, 1, 1);
    the per-prompt mean rewards are (0.2, 1.0, 0.6): mean 0.6, standard error sd/sqrt(3) = 0.4/sqrt(3)."""
    engine = TorchEngine(model, tokenizer)
    graded = WordTask(3, always=lambda ex: (0.2, 1.0, 0.6)[ex.id])
    params = SamplingParams(max_new_tokens=4, seed=1)
    strict = validate(engine, graded, params=params, k=2)
    np.testing.assert_array_equal(strict.pass_rates, [0.0, 1.0, 0.0])
    assert strict.mean_at_k == pytest.approx(1 / 3)
    assert strict.reward_mean == pytest.approx(0.6) and strict.reward_stderr == pytest.approx(0.4 / np.sqrt(3))
    half = validate(engine, graded, params=params, k=2, pass_threshold=0.5)
    np.testing.assert_array_equal(half.pass_rates, [0.0, 1.0, 1.0])
    # float32 rounding below the threshold still passes (0.7 + 0.3 in float32 is 1 - 6e-8)
    near = validate(engine, WordTask(1, always=lambda ex: float(np.float32(0.7) + np.float32(0.3)) - 6e-8),
                    params=params, k=2)
    assert near.mean_at_k == 1.0


def test_bad_arguments(model, tokenizer):
    engine = TorchEngine(model, tokenizer)
    with pytest.raises(ValueError, match="k must be"):
        validate(engine, WordTask(2), params=SamplingParams(), k=0)
    with pytest.raises(ValueError, match="no validation examples"):
        validate(engine, WordTask(0), params=SamplingParams())


def test_a_stop_abandons_the_validation_between_decode_steps_and_rewards(model, tokenizer):
    from scalerl.rollout.trajectory import RolloutStopped

    engine, params = TorchEngine(model, tokenizer), SamplingParams(max_new_tokens=8, seed=3)
    with pytest.raises(RolloutStopped):  # during decoding
        validate(engine, WordTask(3, target="w7"), params=params, k=2, stop=lambda: True)
    scored = []

    def reward(example):  # the stop comes while the second sample is scored
        scored.append(example.id)
        return 1.0

    asked = iter([False] * 2 + [True] * 100)  # two decode-step checks pass... then every one stops
    with pytest.raises(RolloutStopped):
        validate(engine, WordTask(3, always=reward), params=SamplingParams(max_new_tokens=1, seed=3), k=2,
                 stop=lambda: next(asked))
    assert len(scored) < 6  # not every reward waited for
