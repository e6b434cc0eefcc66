"""Validation during training: mean@k arithmetic, a fixed seed for every evaluation, token count."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.data.tasks import Example
from scalerl.eval import Evaluator
from scalerl.models.chat import PromptRenderer
from scalerl.types import Completion, SamplingParams


class CharTokenizer:
    def encode(self, text):
        return [ord(c) for c in text]


class ThreeProblems:
    name = "toy"

    def validation(self):
        return [Example(i, f"p{i}", str(i)) for i in range(3)]

    def prompt(self, example):
        return example.problem  # 2 characters = 2 tokens

    def reward(self, text, example):
        return 1.0 if text == example.answer else -1.0


class ScriptedEngine:
    """Answers prompt i correctly on the first ``right[i]`` of its k samples."""

    tokenizer = CharTokenizer()

    def __init__(self, right, k):
        self.right, self.k, self.seeds = right, k, []

    def generate(self, prompts, params, on_step=None):
        self.seeds.append(params.seed)
        out = []
        for j, prompt in enumerate(prompts):
            i, sample = divmod(j, self.k)
            text = str(i) if sample < self.right[i] else "x"
            out.append(Completion(np.array(prompt), np.array([1, 2, 3]), np.zeros(3, np.float32),
                                  np.zeros(3, np.int64), np.ones(3, bool), "stop", text=text))
        return out


def test_mean_at_k_pass_at_k_and_tokens():
    engine = ScriptedEngine(right=[4, 2, 0], k=4)
    evaluator = Evaluator(engine, PromptRenderer(CharTokenizer()), ThreeProblems(), SamplingParams(), k=4,
                          num_prompts=None, seed=123)
    result = evaluator()
    # per-prompt pass rates 4/4, 2/4, 0/4 -> mean 0.5; two of three prompts solved at least once
    assert result["val_pass_rate"] == 0.5
    # standard error over prompts: sd(1, 0.5, 0; ddof=1) = 0.5, / sqrt(3)
    assert abs(result["val_stderr"] - 0.5 / 3**0.5) < 1e-12
    assert abs(result["val_pass_at_k"] - 2 / 3) < 1e-12
    # 12 samples × (2 prompt tokens + 3 completion tokens)
    assert result["val_tokens"] == 60


def test_every_evaluation_uses_the_same_sampling_seed():
    engine = ScriptedEngine(right=[1, 1, 1], k=2)
    evaluator = Evaluator(engine, PromptRenderer(CharTokenizer()), ThreeProblems(), SamplingParams(), k=2,
                          num_prompts=2, seed=7)
    evaluator()
    evaluator()
    assert engine.seeds == [7, 7]


def test_a_downstream_variant_is_evaluated_beside_the_validation_set(tmp_path):
    from scalerl.config import ConfigError, load_config
    from scalerl.pipeline import build

    with pytest.raises(ConfigError, match=r"eval.downstream_knobs: task 'addition' has no knob 'digits'"):
        load_config("scalerl", ["eval.downstream_knobs={digits: 3}"])
    cfg = load_config("scalerl", ["eval.downstream_knobs={min_digits: 3, max_digits: 3}", "eval.num_prompts=4",
                                  "eval.k=1"])
    from scalerl.data.tasks import get_task
    from scalerl.models import build_model, build_task_tokenizer

    tok = build_task_tokenizer()
    task = get_task("addition", **cfg.task.knobs)
    val, down = build.evaluators(cfg, build_model("nano", len(tok), tokenizer=tok), tok)
    assert (val.prefix, down.prefix) == ("val", "downstream")
    assert all(len(ex.problem) > len(task.validation()[0].problem) for ex in down.task.validation()[:4])
    result = down()
    assert 0 <= result["downstream_pass_rate"] <= 1 and result["downstream_tokens"] > 0


def test_unbiased_pass_at_k_and_mean_at_k_with_their_errors():
    engine = ScriptedEngine(right=[4, 2, 0], k=4)
    evaluator = Evaluator(engine, PromptRenderer(CharTokenizer()), ThreeProblems(), SamplingParams(), k=4,
                          num_prompts=None, seed=123, pass_at=(1, 2, 4))
    result = evaluator()
    # pass@2 per prompt: 1, 1 - C(2,2)/C(4,2) = 5/6, 0 -> mean 11/18
    assert result["val_pass_at_2"] == pytest.approx(11 / 18)
    assert result["val_pass_at_2_stderr"] == pytest.approx(np.std([1, 5 / 6, 0], ddof=1) / 3**0.5)
    assert result["val_pass_at_1"] == pytest.approx(result["val_pass_rate"])  # pass@1 is mean@k
    assert result["val_pass_at_4"] == pytest.approx(result["val_pass_at_k"])  # pass@n: any correct
    assert result["val_mean_at_k"] == 0.5 and result["val_mean_at_k_stderr"] == result["val_stderr"]


def test_eval_pass_at_above_eval_k_is_one_sentence():
    from scalerl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"eval.pass_at 8 must lie in \[1, eval.k = 4\]"):
        load_config("scalerl", ["eval.k=4", "eval.pass_at=[2,8]"])


class Unscorable(ThreeProblems):
    """A reward function that declines every sample (None, carried as NaN)."""

    def reward(self, text, example):
        return float("nan")


def test_a_validation_with_no_scored_sample_has_no_rate_and_no_warning():
    import warnings

    engine = ScriptedEngine(right=[4, 2, 0], k=2)
    evaluator = Evaluator(engine, PromptRenderer(CharTokenizer()), Unscorable(), SamplingParams(), k=2,
                          num_prompts=None, seed=123)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" must not leak into the run log
        result = evaluator()
    for key in ("val_pass_rate", "val_stderr", "val_pass_at_k", "val_mean_at_k"):
        assert np.isnan(result[key]), key  # logged as null
