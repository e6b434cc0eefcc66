"""task.name: dataset, chat-message prompts in math, and the user's reward function."""

import json
import math

import pytest

from scalerl.data.tasks import get_task
from scalerl.data.tasks.base import PromptError
from scalerl.data.tasks.spec import TaskSpec
from scalerl.data.tasks.user_reward import UserRewardTask

MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 3+4?"}]

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def data(tmp_path):
    records = [{"prompt": [*MESSAGES, {"role": "user", "content": f"and {i}+1?"}] if i % 2 else f"What is {i}+1?",
                "answer": str(i + 1), "level": i} for i in range(20)]
    return write_jsonl(tmp_path / "data.jsonl", records)


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(
        "import os\n"
        "def score(completion, answer, level, prompt, **rest):\n"
        "    if completion == 'skip':\n        return None\n"
        "    if completion == 'boom':\n        raise RuntimeError('my bug')\n"
        "    if completion == 'nan':\n        return float('nan')\n"
        "    return 1.0 if completion.strip() == answer else 0.0\n"
        "def who(completion, **fields):\n    return float(os.getpid())\n")
    return path


def test_dataset_keeps_prompts_and_every_column(data):
    task = get_task("dataset", path=str(data), num_validation=4)
    assert task.num_train == 16 and len(task.validation()) == 4
    prompts = [task.prompt(task.train_example(i)) for i in range(task.num_train)]
    assert any(isinstance(p, list) and p[:2] == MESSAGES for p in prompts)
    assert any(isinstance(p, str) for p in prompts)
    example = next(task.train_example(i) for i in range(task.num_train) if isinstance(prompts[i], str))
    assert example.meta["fields"]["answer"] == example.answer and "level" in example.meta["fields"]


def test_validation_file(data, tmp_path):
    val = write_jsonl(tmp_path / "val.jsonl", [{"prompt": "held out", "answer": "x"}])
    task = get_task("dataset", path=str(data), validation_path=str(val))
    assert [task.prompt(e) for e in task.validation()] == ["held out"]


def test_bad_records_name_file_and_line(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "ok"}, {"prompt": 5}])
    with pytest.raises(PromptError, match=r"bad.jsonl:2: field 'prompt': the prompt is neither a string"):
        get_task("dataset", path=str(bad))
    missing = write_jsonl(tmp_path / "missing.jsonl", [{"prompt": "ok"}, {"question": "?"}])
    with pytest.raises(KeyError, match=r"missing.jsonl:2: missing field 'prompt'"):
        get_task("dataset", path=str(missing))
    roles = write_jsonl(tmp_path / "roles.jsonl", [{"prompt": [{"role": "user"}]}])
    with pytest.raises(PromptError, match="roles.jsonl:1"):
        get_task("dataset", path=str(roles))


def test_math_takes_message_prompts(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem": MESSAGES, "answer": "7"}] * 1
                       + [{"problem": f"{i}+1", "answer": str(i + 1)} for i in range(6)])
    task = get_task("math", path=str(path), num_validation=1)
    prompts = [task.prompt(e) for e in [*task.validation(), *map(task.train_example, range(task.num_train))]]
    assert MESSAGES in prompts  # given to the chat template as they are, never str() of a list
    assert all(isinstance(p, str) and "Problem:" in p for p in prompts if p != MESSAGES)


def test_user_reward(data, reward_file, capsys):
    task = TaskSpec("dataset", {"path": str(data)}, (f"{reward_file}:score",)).build()
    assert isinstance(task, UserRewardTask)
    example = task.train_example(0)
    assert task.reward(example.answer, example) == 1.0
    assert task.reward("wrong", example) == 0.0
    assert math.isnan(task.reward("skip", example)) and task.reward_none == 1
    assert task.reward("boom", example) == 0.0 and task.reward("nan", example) == 0.0
    assert task.reward_errors == 2
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and "my bug" in err  # the first failure only


def test_user_reward_on_a_builtin_task(reward_file):
    task = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{reward_file}:who",)).build()
    import os

    assert task.reward("x", task.train_example(0)) == float(os.getpid())
    assert task.num_train == get_task("addition", min_digits=1, max_digits=1).num_train


def test_code_takes_message_prompts(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"problem": MESSAGES, "tests": ["assert f() == 1"]},
                                              {"problem": "p2", "tests": ["assert f() == 2"]}])
    task = get_task("code", path=str(path), num_validation=0)
    prompts = [task.prompt(task.train_example(i)) for i in range(task.num_train)]
    assert MESSAGES in prompts and any(isinstance(p, str) and "p2" in p for p in prompts)


def test_a_task_factory_from_a_file(tmp_path, data):
    factory = tmp_path / "my_task.py"
    factory.write_text("from scalerl.data.tasks import get_task\n"
                       "def make(path):\n    return get_task('dataset', path=path, num_validation=2)\n")
    task = TaskSpec(f"{factory}:make", {"path": str(data)}).build()
    assert task.num_train == 18 and len(task.validation()) == 2
    from scalerl.data.tasks.registry import check_task

    with pytest.raises(ValueError, match="needs the knob 'path'"):
        check_task(f"{factory}:make", {})


def test_a_column_some_rows_lack_is_none_there_and_said_once(tmp_path):
    # newcomer trial 3 (F3): rows without `answer` reached the reward as answer='' in silence
    rows = [{"prompt": f"q{i}", **({"answer": str(i)} if i % 4 else {}), **({"hint": "h"} if i == 5 else {})}
            for i in range(20)]
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    task = get_task("dataset", path=str(path), num_validation=2)
    assert task.columns == ["answer", "hint"]
    assert task.partial_columns == {"answer": (5, f"{path}:1"), "hint": (19, f"{path}:1")}
    from scalerl.data.tasks.dataset import reward_fields

    examples = [*map(task.train_example, range(task.num_train)), *task.validation()]
    got = {e.problem: reward_fields(task, e) for e in examples}
    assert got["q4"] == {"answer": None, "hint": None, "prompt": "q4"}  # None, as datasets passes it
    assert got["q5"] == {"answer": "5", "hint": "h", "prompt": "q5"}
    note = task.columns_note
    assert note.count("\n") == 0 and "'answer' is missing from 5 of 20 rows" in note and "None" in note


def test_a_row_with_only_a_prompt_gets_no_invented_answer(tmp_path):
    path = write_jsonl(tmp_path / "data.jsonl", [{"prompt": f"q{i}"} for i in range(6)])
    task = get_task("dataset", path=str(path), num_validation=2)
    from scalerl.data.tasks.dataset import reward_fields

    assert reward_fields(task, task.train_example(0)) == {"prompt": task.train_example(0).problem}
    assert task.partial_columns == {} and task.columns_note is None


def test_preflight_refuses_a_row_without_a_column_a_reward_function_names(tmp_path):
    from scalerl.config import ConfigError
    from scalerl.pipeline.commands.preflight import _check_named_columns

    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(8)]
    rows[5] = {"prompt": "q5", "level": 2}
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    (tmp_path / "r.py").write_text(
        "def named(completion, answer, **kw):\n    return 0.0\n"
        "def defaulted(completion, level=None, **kw):\n    return 0.0\n"
        "def trl(completions, answer, **kw):\n    return [0.0] * len(completions)\n"
        "def loose(completion, **kw):\n    return 0.0\n")
    for name in ("named", "trl"):
        task = TaskSpec("dataset", {"path": str(path), "num_validation": 2}, (f"{tmp_path}/r.py:{name}",)).build()
        with pytest.raises(ConfigError) as err:
            _check_named_columns(task)
        text = str(err.value)
        assert text.startswith(f"{path}:6: the row has no column 'answer'") and f"r.py:{name}" in text
        assert text.count(". ") == 0 and text.endswith(".")
    for name in ("defaulted", "loose"):  # a default or **kw: the row's None is the function's to handle
        task = TaskSpec("dataset", {"path": str(path), "num_validation": 2}, (f"{tmp_path}/r.py:{name}",)).build()
        _check_named_columns(task)
