"""The single-turn rollout scores with a user's reward functions in one batch: a TRL-form
function sees every completion of the call at once (G per example, prompt-major), and each
function's own rewards leave with the trajectories (``reward_parts``)."""

from __future__ import annotations

import numpy as np

from scalerl.data.tasks.spec import TaskSpec
from scalerl.models.chat import ChatFormat, PromptRenderer
from scalerl.rollout.rollout import SingleTurn
from scalerl.types import Completion, SamplingParams

from .tiny import make_tokenizer

FUNCTIONS = '''
CALLS = []

def batch(prompts, completions, completion_ids, trainer_state, answer, **kwargs):
    CALLS.append((list(completions), [len(i) for i in completion_ids], trainer_state.global_step, list(answer)))
    return [float(len(c)) for c in completions]

def each(completion, **fields):
    return None if completion.startswith("b") else 1.0
'''


class ScriptedEngine:
    """Completion i of a call is ``texts[i]`` (i + 1 tokens); holds weights version 7."""

    version = 7

    def __init__(self, texts):
        self.texts = texts

    def generate(self, prompts, params, on_step=None):
        return [Completion(np.asarray(p, dtype=np.int64), np.arange(i + 1), np.zeros(i + 1, np.float32),
                           np.full(i + 1, self.version), np.ones(i + 1, bool), "stop", text=self.texts[i])
                for i, p in enumerate(prompts)]


def test_one_batch_call_scores_every_completion_and_parts_travel(tmp_path):
    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{path}:batch", f"{path}:each"),
                    reward_weights=(1.0, 10.0)).build()
    rollout = SingleTurn(task, PromptRenderer(make_tokenizer(), ChatFormat()))
    examples = [task.train_example(0), task.train_example(1)]
    texts = ["a", "bb", "ccc", "b"]
    out = rollout.run(ScriptedEngine(texts), examples, 2, SamplingParams())
    calls = __import__("sys").modules[task.functions[0].fn.__module__].CALLS
    answers = [examples[0].answer] * 2 + [examples[1].answer] * 2
    assert calls == [(texts, [1, 2, 3, 4], 7, answers)]  # one call, prompt-major, the engine's version
    assert [t.rewards.tolist() for t in out] == [[11.0, 2.0], [13.0, 1.0]]  # len + 10·(1 or None)
    assert out[0].reward_parts["batch"].tolist() == [1.0, 2.0]
    assert np.allclose(out[1].reward_parts["each"], [1.0, np.nan], equal_nan=True)
    assert all(t.reward_errors == 0 and t.rewards.dtype == np.float32 for t in out)
    assert [t.reward_part_errors for t in out] == [{"batch": 0, "each": 0}] * 2


def test_each_function_s_failures_travel_by_name(tmp_path):
    """So the first batch's check can name the function that failed, not every one."""
    path = tmp_path / "fns.py"
    path.write_text("def fine(completion, **fields):\n    return 1.0\n"
                    "def broken(completion, **fields):\n    if completion != 'a':\n        raise ValueError('bug')\n"
                    "    return 1.0\n")
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{path}:fine", f"{path}:broken")).build()
    rollout = SingleTurn(task, PromptRenderer(make_tokenizer(), ChatFormat()))
    out = rollout.run(ScriptedEngine(["a", "bb", "ccc", "b"]), [task.train_example(0), task.train_example(1)], 2,
                      SamplingParams())
    assert [t.reward_part_errors for t in out] == [{"fine": 0, "broken": 1}, {"fine": 0, "broken": 2}]
    assert [t.reward_errors for t in out] == [1, 2]


def test_the_task_s_own_reward_leaves_no_parts():
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}).build()
    rollout = SingleTurn(task, PromptRenderer(make_tokenizer(), ChatFormat()))
    example = task.train_example(0)
    (out,) = rollout.run(ScriptedEngine([f"<think></think> {example.answer}", "no"]), [example], 2, SamplingParams())
    assert out.reward_parts == {} and out.rewards.tolist() == [1.0, 0.0]
