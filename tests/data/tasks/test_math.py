import json
import threading

import pytest

from scalerl.data.tasks import get_task, plus_minus_one
from scalerl.data.tasks.base import Example
from scalerl.data.tasks.math import math_reward

HALF = Example(id=0, problem="What is 1 divided by 2?", answer="\\frac{1}{2}")


@pytest.mark.parametrize("said", ["1/2", "0.5", "\\frac{1}{2}", "\\boxed{\\frac12}", "$0.50$"])
def test_equivalent_answers_are_accepted(said):
    assert math_reward(f"<think> halve it </think> The answer is {said}", HALF) == 1.0


@pytest.mark.parametrize("said", ["1/3", "2", "\\boxed{0.6}", ""])
def test_wrong_or_missing_answers_are_rejected(said):
    assert math_reward(f"<think> 1/2 </think> {said}", HALF) == 0.0


def test_answer_inside_thinking_does_not_count():
    assert math_reward("<think> the answer is 1/2", HALF) == 0.0
    assert math_reward("<think> 1/2 </think> wait </think> 1/3", HALF) == 0.0


def test_plus_minus_one_and_off_main_thread():
    pm = plus_minus_one(math_reward)
    assert pm("</think> 0.5", HALF) == 1.0 and pm("</think> 7", HALF) == -1.0
    out = []
    t = threading.Thread(target=lambda: out.append(math_reward("</think> 0.5", HALF)))
    t.start()
    t.join()
    assert out == [1.0]


def _rows(n):
    return [{"question": f"{i} + {i} = ?", "final": str(2 * i), "why": f"{i}+{i}"} for i in range(n)]


def test_jsonl_task_splits_disjoint_and_demonstration_scores(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows(30)) + "\n")
    task = get_task("math", path=path, problem_field="question", answer_field="final",
                    solution_field="why", num_validation=10)
    assert task.num_train == 20 and len(task.validation()) == 10
    train = {task.train_example(i).problem for i in range(task.num_train)}
    assert not train & {e.problem for e in task.validation()}
    ex = task.train_example(3)
    assert ex.problem in task.prompt(ex)
    assert task.reward(task.demonstration(ex), ex) == 1.0
