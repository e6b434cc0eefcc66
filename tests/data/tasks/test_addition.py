import pytest

from scalerl.data.tasks import get_task, plus_minus_one
from scalerl.data.tasks.addition import AdditionTask, addition_reward, scratchpad
from scalerl.data.tasks.base import Example, Task, first_integer, strip_thinking
from scalerl.types import INTERRUPTION_PHRASE


@pytest.fixture(scope="module")
def task():
    return get_task("addition", min_digits=2, max_digits=4, seed=7)


def test_satisfies_the_task_protocol(task):
    assert isinstance(task, Task) and task.name == "addition"


def test_examples_are_deterministic_from_seed_and_index(task):
    again = AdditionTask(min_digits=2, max_digits=4, seed=7)
    assert [task.train_example(i) for i in range(20)] == [again.train_example(i) for i in range(20)]
    other = AdditionTask(min_digits=2, max_digits=4, seed=8)
    assert [task.train_example(i).problem for i in range(20)] != [
        other.train_example(i).problem for i in range(20)
    ]


def test_train_and_validation_never_overlap_across_seeds(task):
    val = {ex.problem for ex in task.validation()}
    assert len(task.validation()) == 1200 and len(val) > 1100  # 2–4 digits: repeats are rare
    for seed in (7, 8):
        t = AdditionTask(min_digits=2, max_digits=4, seed=seed)
        assert not val & {t.train_example(i).problem for i in range(3000)}


def test_a_small_problem_space_is_sampled_iid_in_proportion_to_its_distribution():
    # 1-digit pairs: 100 problems, ~10% land in validation; 500 draws repeat them
    task = AdditionTask(min_digits=1, max_digits=1, num_validation=500)
    val = task.validation()
    distinct = {e.problem for e in val}
    assert len(val) == 500 and 0 < len(distinct) < 30 and [e.id for e in val] == list(range(500))
    assert not distinct & {task.train_example(i).problem for i in range(2000)}
    # 1–2 digits: each operand is 1-digit half the time, so 1-digit + 1-digit sums are about a
    # quarter of the draws, though they are 1% of the problem space
    mixed = AdditionTask(min_digits=1, max_digits=2, num_validation=1200).validation()
    small = sum(all(x < 10 for x in e.meta["operands"]) for e in mixed) / len(mixed)
    assert 0.15 < small < 0.35


def test_digit_and_operand_knobs():
    t = AdditionTask(min_digits=4, max_digits=4, num_operands=3)
    ops = t.train_example(0).meta["operands"]
    assert len(ops) == 3 and all(1000 <= x <= 9999 for x in ops)
    with pytest.raises(ValueError):
        AdditionTask(min_digits=3, max_digits=2)


def test_scratchpad_by_hand():
    # 4821+379: columns 1+9=10, 2+7+1=10, 8+3+1=12, 4+0+1=5 -> 5200.
    assert scratchpad([4821, 379]) == "1+9+0=10 r0 2+7+1=10 r00 8+3+1=12 r200 4+0+1=5 r5200"
    # The last column writes its whole sum: 95+17 = 112.
    assert scratchpad([95, 17]) == "5+7+0=12 r2 9+1+1=11 r112"


def test_demonstration_earns_reward_and_wrong_answers_do_not(task):
    for i in range(50):
        ex = task.train_example(i)
        demo = task.demonstration(ex)
        assert demo.startswith("<think> ") and task.reward(demo, ex) == 1.0
        wrong = demo.rsplit(" ", 1)[0] + f" {int(ex.answer) + 1}"
        assert task.reward(wrong, ex) == 0.0
    # The thinking is tens of tokens and grows with the digits.
    assert len(scratchpad([4821, 379])) > 2 * len(scratchpad([21, 79]))


def test_answer_is_taken_after_the_last_think_close():
    ex = Example(id=0, problem="2+3", answer="5")
    assert addition_reward("<think> 5 </think> 4 </think> 5", ex) == 1.0
    assert addition_reward("<think> 2+3=5 </think> 6", ex) == 0.0
    assert addition_reward("<think> 2+3=5 r5", ex) == 0.0  # thinking never ended
    assert addition_reward("<think></think>5 and 7", ex) == 1.0  # first integer only
    assert strip_thinking("no think") == "" and first_integer("x -12 y 3") == -12


def test_interrupted_completion_then_answer_parses():
    ex = Example(id=0, problem="48+79", answer="127")
    text = "<think> 8+9+0=17 r7 4+7+1=1" + INTERRUPTION_PHRASE + " 127"
    assert addition_reward(text, ex) == 1.0


def test_plus_minus_one_wrapper_and_custom_reward():
    ex = Example(id=0, problem="2+3", answer="5")
    pm = plus_minus_one(addition_reward)
    assert pm("</think> 5", ex) == 1.0 and pm("</think> 4", ex) == -1.0
    t = AdditionTask(reward_fn=lambda text, e: 1.0 if "x" in text else 0.0)
    assert t.reward("x", ex) == 1.0


def test_unknown_task_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        get_task("nope")
