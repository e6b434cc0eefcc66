"""``pipeline.learner.batch.score``: the rewards as returned, what the loss trains on, and passes,
each checked against numbers worked out by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from scalerl.pipeline.learner.batch import prepare_batch, score
from scalerl.pipeline.learner.rules import BatchRules
from scalerl.types import Completion, Group

RULES = BatchRules(reward_form="as_is", truncation_is_failure=False, pass_threshold=1.0, length_control="none",
                   penalty_max_len=40, penalty_cache=8, truncation="keep", zero_variance=True,
                   advantage_norm="batch", advantage_eps=1e-6, aggregation="prompt")


def _completion(finish: str, n: int = 3) -> Completion:
    return Completion(np.arange(n), np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.int64),
                      np.ones(n, bool), finish, text="x")


def _groups() -> list[Group]:
    """Two prompts × 4: a graded reward in [0, 1], the last of each group cut by the length limit."""
    finishes = ["stop", "stop", "stop", "length"]
    return [Group(0, [_completion(f) for f in finishes], np.array([0.2, 1.0, 0.0, 1.0], np.float32)),
            Group(1, [_completion(f) for f in finishes], np.array([0.6, np.nan, 1.0, 0.4], np.float32))]


def test_as_returned_the_reward_is_trained_on_unchanged_and_a_pass_is_reaching_the_threshold():
    s = score(_groups(), RULES)
    torch.testing.assert_close(s.trained, torch.tensor([[0.2, 1.0, 0.0, 1.0], [0.6, 0.0, 1.0, 0.4]]))
    assert s.passed.tolist() == [[False, True, False, True], [False, False, True, False]]
    assert s.scored.tolist() == [[True] * 4, [True, False, True, True]]
    metrics = prepare_batch(_groups(), RULES, learner_version=0, pad_id=0).metrics
    # by hand: scored rewards 0.2 1 0 1 0.6 1 0.4 -> 4.2 / 7; passes 3 of 7
    assert metrics["reward_mean"] == pytest.approx(4.2 / 7) and metrics["trained_reward_mean"] == pytest.approx(4.2 / 7)
    assert metrics["pass_rate"] == pytest.approx(3 / 7)


def test_the_papers_transform_fails_cut_completions_and_maps_to_plus_minus_one():
    rules = dataclasses.replace(RULES, reward_form="pm1", truncation_is_failure=True)
    s = score(_groups(), rules)
    # truncated (column 3) -> 0 before the form; then 2r - 1: 0.2 -> -0.6, 1 -> 1, 0 -> -1, 0.6 -> 0.2
    torch.testing.assert_close(s.trained, torch.tensor([[-0.6, 1.0, -1.0, -1.0], [0.2, -1.0, 1.0, -1.0]]))
    assert s.trained_passed.tolist() == [[False, True, False, False], [False, False, True, False]]
    metrics = prepare_batch(_groups(), rules, learner_version=0, pad_id=0).metrics
    assert metrics["reward_mean"] == pytest.approx(4.2 / 7)  # the reward as returned, whatever the loss saw
    assert metrics["trained_reward_mean"] == pytest.approx((-0.6 + 1 - 1 - 1 + 0.2 + 1 - 1) / 7)
    assert metrics["pass_rate"] == pytest.approx(3 / 7)  # as validation counts: the truncation rule is training's


def test_the_curriculum_sees_trained_passes_and_a_lower_threshold_counts_partial_credit():
    rules = dataclasses.replace(RULES, truncation_is_failure=True, pass_threshold=0.5)
    batch = prepare_batch(_groups(), rules, learner_version=0, pad_id=0)
    # prompt 0: 1.0 passes, the cut 1.0 fails by the rule -> 1/4; prompt 1: 0.6 and 1.0 of 3 scored -> 2/3
    assert batch.pass_rates == [(0, pytest.approx(1 / 4)), (1, pytest.approx(2 / 3))]
    assert batch.metrics["pass_rate"] == pytest.approx(4 / 7)  # as returned: 1.0 and the cut 1.0 | 0.6, 1.0
