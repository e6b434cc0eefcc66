"""The calculator task and its tool: problems, the tool's arithmetic, an episode's reward."""

from __future__ import annotations

import pytest

from scalerl.data.tasks import get_task
from scalerl.data.tasks.calculator import answer_of
from scalerl.data.tasks.calculator_env import CalculatorEnv, calculate


def test_problems_are_deterministic_and_the_splits_disjoint():
    task = get_task("calculator", min_digits=2, max_digits=3, operations="+*", num_validation=200)
    again = get_task("calculator", min_digits=2, max_digits=3, operations="+*", num_validation=200)
    train = {task.train_example(i).problem for i in range(300)}
    assert [task.train_example(i) for i in range(5)] == [again.train_example(i) for i in range(5)]
    assert not train & {e.problem for e in task.validation()}
    ex = task.train_example(0)
    a, op, b = ex.problem.partition("+") if "+" in ex.problem else ex.problem.partition("*")
    assert int(ex.answer) == (int(a) + int(b) if op == "+" else int(a) * int(b))
    assert task.prompt(ex) == f"{'add' if op == '+' else 'mul'} {ex.problem} ="


def test_the_demonstrated_episode_scores_one():
    task = get_task("calculator")
    ex = task.train_example(3)
    pieces = task.demonstration_turns(ex)
    assert [trained for _, trained in pieces] == [True, False, True]  # the tool's answer is not imitated
    assert task.reward(task.demonstration(ex), ex) == 1.0
    assert task.reward(f"<calc>{ex.problem}</calc><result>{ex.answer}</result> 7", ex) == 0.0
    assert answer_of("<result>12</result> 5") == 5 and answer_of("41") == 41


@pytest.mark.parametrize("expr, value", [("347*62", 21514), (" 12 + 3*4 ", 24), ("-5-2", -7), ("7", 7)])
def test_the_tool_evaluates_integer_arithmetic(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize("expr", ["__import__('os')", "2**10", "1/2", "x+1", "1e3", "((" * 400 + "1" + "))" * 400,
                                  "1" * 13 + "*2", "+".join(["1"] * 12), ""])
def test_the_tool_runs_no_code_and_refuses_what_is_not_small_arithmetic(expr):
    assert calculate(expr) is None


def test_an_episode_answers_tool_calls_then_scores_the_final_answer():
    task = get_task("calculator")
    ex = task.train_example(0)
    env = CalculatorEnv()
    assert env.reset({"id": 0, "problem": ex.problem, "answer": ex.answer, "meta": dict(ex.meta)}) == task.prompt(ex)
    assert env.step(f"<calc>{ex.problem}</calc>") == (f"<result>{ex.answer}</result>", None, False)
    assert env.step("<calc>2**3</calc>") == ("<result>error</result>", None, False)
    assert env.step(f" {ex.answer}") == (None, 1.0, True)
    assert env.step(" 1") == (None, 0.0, True)
