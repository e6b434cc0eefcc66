"""TRL's reward functions as they are (issue 29): a function naming ``completions`` is called on a
batch with TRL's keyword arguments; several functions combine as TRL's weighted ``nansum``; a
result of the wrong shape is one counted error; each function's own rewards are kept by name."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from scalerl.data.tasks.spec import TaskSpec
from scalerl.data.tasks.trl_reward import TrainerState, checked_batch, takes_batch
from scalerl.data.tasks.user_reward import metric_names, reward_part_metrics


def chat(i: int) -> list[dict]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"{i}+2?"}]

FUNCTIONS = '''
import math
CALLS = []

def spy(prompts, completions, completion_ids, trainer_state, **kwargs):
    CALLS.append(dict(prompts=prompts, completions=completions, completion_ids=completion_ids,
                      trainer_state=trainer_state, **kwargs))
    return [float(len(c if isinstance(c, str) else c[0]["content"])) for c in completions]

def trl_form(completions, answer, **kwargs):  # 1.0 when the answer is in it, None for "skip"
    return [None if c == "skip" else float(a in c) for c, a in zip(completions, answer)]

def per_sample(completion, **fields):  # 0.5 for a short answer, None for "skip" and "none"
    return None if completion in ("skip", "none") else (0.5 if len(completion) < 3 else 0.0)

def short(completions, **kwargs):
    return [1.0] * (len(completions) - 1)

def not_a_list(completions, **kwargs):
    return 1.0

def bad_entry(completions, **kwargs):
    return ["x" if c == "bad" else 1.0 for c in completions]

def nan_is_none(completions, **kwargs):
    return [math.nan] + [2.0] * (len(completions) - 1)
'''


@pytest.fixture
def fns(tmp_path):
    path = tmp_path / "fns.py"
    path.write_text(FUNCTIONS)
    return path


@pytest.fixture
def chat_data(tmp_path):
    path = tmp_path / "train.jsonl"
    records = [{"prompt": chat(i), "answer": str(i + 2), "level": i % 3} for i in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _module(task):
    return __import__("sys").modules[task.functions[0].fn.__module__]


def test_the_form_is_told_by_the_signature():
    assert takes_batch(lambda prompts, completions, **kw: [])
    assert takes_batch(lambda *, completions: [])
    assert not takes_batch(lambda completion, **fields: 0.0)
    assert not takes_batch(lambda **kwargs: 0.0)  # only **kwargs: per sample, as before
    assert not takes_batch(lambda completion, completions: 0.0)


def test_chat_prompts_reach_a_trl_function_as_trl_passes_them(fns, chat_data):
    task = TaskSpec("dataset", {"path": str(chat_data), "num_validation": 2}, (f"{fns}:spy",)).build()
    examples = [task.train_example(0), task.train_example(0), task.train_example(1)]
    scores = task.score_batch(["four", "4", "x"], examples, [[5, 6], [7], [8, 9, 10]], TrainerState(3))
    (call,) = _module(task).CALLS  # one call for the whole batch
    assert call["prompts"] == [task.prompt(ex) for ex in examples]
    assert call["prompts"][0] == chat(int(examples[0].meta["fields"]["answer"]) - 2)  # the record's messages
    assert call["completions"] == [[{"role": "assistant", "content": "four"}],
                                   [{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "x"}]]
    assert call["completion_ids"] == [[5, 6], [7], [8, 9, 10]]
    assert call["trainer_state"] == TrainerState(global_step=3)
    answers = [ex.meta["fields"]["answer"] for ex in examples]
    levels = [ex.meta["fields"]["level"] for ex in examples]
    assert call["answer"] == answers and call["level"] == levels  # every other column, one entry per completion
    assert set(call) == {"prompts", "completions", "completion_ids", "trainer_state", "answer", "level"}
    assert scores.rewards.tolist() == [4.0, 1.0, 1.0] and scores.rewards.dtype == np.float32
    assert scores.parts["spy"].tolist() == [4.0, 1.0, 1.0] and not scores.errors.any()


def test_text_prompts_and_completions_stay_strings(fns):
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{fns}:spy",)).build()
    example = task.train_example(0)
    task.score_batch(["a", "bb"], [example, example])
    (call,) = _module(task).CALLS
    assert call["prompts"] == [task.prompt(example)] * 2 and isinstance(call["prompts"][0], str)
    assert call["completions"] == ["a", "bb"] and call["answer"] == [example.answer] * 2
    assert call["completion_ids"] == [None, None] and call["trainer_state"] is None  # no rollout: nothing to pass
    assert task.reward("ccc", example) == 3.0  # one sample is a batch of one


def test_weights_sum_over_the_functions_that_scored_skipping_none(fns):
    spec = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{fns}:trl_form", f"{fns}:per_sample"),
                    reward_weights=(2.0, -4.0))
    task = spec.build()
    ex = task.train_example(0)
    texts = [ex.answer, "wrong answer", "skip", "none"]
    scores = task.score_batch(texts, [ex] * 4)
    # trl_form: 1, 0, None, 0 (the answer is one digit: not in "none"); per_sample: 0.5, 0, None, None
    assert np.allclose(scores.parts["trl_form"], [1, 0, np.nan, 0], equal_nan=True)
    assert np.allclose(scores.parts["per_sample"], [0.5, 0, np.nan, np.nan], equal_nan=True)
    # 2·1 − 4·0.5 = 0; 2·0 − 4·0 = 0; no function scored: NaN; only trl_form scored: 2·0
    assert np.allclose(scores.rewards, [0.0, 0.0, np.nan, 0.0], equal_nan=True)
    assert task.reward_none == 1 and task.reward_errors == 0
    scores = task.score_batch(["zz"], [ex])  # 2·0 − 4·0.5
    assert scores.rewards.tolist() == [-2.0]


@pytest.mark.parametrize("name, needle", [("short", "returned 2 rewards for 3 completions"),
                                          ("not_a_list", "not a list of 3 rewards")])
def test_a_result_of_the_wrong_shape_scores_the_batch_zero_counted_once(fns, name, needle, capsys):
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{fns}:{name}", f"{fns}:per_sample")).build()
    ex = task.train_example(0)
    for _ in range(2):
        scores = task.score_batch(["a", "b", "long"], [ex] * 3)
        assert scores.parts[name].tolist() == [0.0, 0.0, 0.0] and scores.errors.all()
        assert scores.rewards.tolist() == [0.5, 0.5, 0.0]  # the other function still counts
    assert task.reward_errors == 6
    err = capsys.readouterr().err
    assert err.count("failed on a batch of 3 samples") == 1 and needle in err and "Traceback" not in err


def test_a_bad_entry_fails_its_sample_only_and_nan_is_none(fns, capsys):
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{fns}:bad_entry", f"{fns}:nan_is_none")).build()
    ex = task.train_example(0)
    scores = task.score_batch(["bad", "ok", "ok"], [ex] * 3)
    assert scores.errors.tolist() == [True, False, False] and task.reward_errors == 1
    assert np.allclose(scores.parts["nan_is_none"], [np.nan, 2, 2], equal_nan=True)
    assert scores.rewards.tolist() == [0.0, 3.0, 3.0]  # 0 (error) + NaN skipped; 1 + 2
    assert "entry 0 of its list: it returned 'x'" in capsys.readouterr().err


def test_checked_batch_takes_arrays_and_refuses_strings():
    assert checked_batch(np.array([1.0, 0.5]), 2) == [1.0, 0.5]
    with pytest.raises(TypeError, match="not a list of 2 rewards"):
        checked_batch("ab", 2)


def test_a_trl_function_that_raises_or_exits_is_contained(tmp_path):
    path = tmp_path / "r.py"
    path.write_text("import sys\ndef f(completions, **kw):\n    sys.exit(1)\n")
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{path}:f",), reward_timeout_s=5).build()
    scores = task.score_batch(["a", "b"], [task.train_example(0)] * 2)
    assert scores.rewards.tolist() == [0.0, 0.0] and task.reward_errors == 2


def test_names_are_disambiguated_and_part_metrics_skip_none():
    assert metric_names(["/a.py:score", "/b.py:score", "m.x:fmt"]) == ["score_1", "score_2", "fmt"]
    parts = [{"f": np.array([1.0, np.nan], dtype=np.float32), "g": np.array([np.nan, np.nan], dtype=np.float32)},
             {"f": np.array([3.0, 2.0], dtype=np.float32), "g": np.array([np.nan, np.nan], dtype=np.float32)}]
    metrics = reward_part_metrics(parts)
    assert metrics["reward/f"] == 2.0 and math.isclose(metrics["reward/f_std"], math.sqrt(2 / 3))
    assert math.isnan(metrics["reward/g"]) and math.isnan(metrics["reward/g_std"])
    assert reward_part_metrics([{}, {}]) == {}


def test_async_functions_are_awaited(tmp_path):
    path = tmp_path / "r.py"
    path.write_text("async def trl(completions, **kw):\n    return [2.0] * len(completions)\n"
                    "async def each(completion, **fields):\n    return 0.5\n")
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{path}:trl", f"{path}:each")).build()
    assert task.score_batch(["a", "b"], [task.train_example(0)] * 2).rewards.tolist() == [2.5, 2.5]
