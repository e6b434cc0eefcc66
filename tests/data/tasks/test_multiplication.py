from scalerl.data.tasks import get_task
from scalerl.data.tasks.addition import AdditionTask
from scalerl.data.tasks.multiplication import MultiplicationTask, scratchpad
from scalerl.data.tasks.tokenizer import build_task_tokenizer


def test_scratchpad_by_hand():
    # 347*6: 7*6=42 (2, carry 4), 4*6+4=28 (8, carry 2), 3*6+2=20 (last: whole) -> 2082.
    assert scratchpad(347, 6) == "7*6+0=42 r2 4*6+4=28 r82 3*6+2=20 r2082"
    assert scratchpad(5, 9) == "5*9+0=45 r45"


def test_examples_demonstrations_and_rewards():
    task = get_task("multiplication", min_digits=2, max_digits=4, seed=3)
    assert task.name == "multiplication"
    for i in range(50):
        ex = task.train_example(i)
        a, b = ex.meta["operands"]
        assert int(ex.answer) == a * b and 2 <= b <= 9 and 10 <= a <= 9999
        assert task.prompt(ex) == f"mul {a}*{b} ="
        demo = task.demonstration(ex)
        assert task.reward(demo, ex) == 1.0
        assert task.reward(demo.replace(f"</think> {ex.answer}", f"</think> {a * b + 1}"), ex) == 0.0
    assert task.train_example(7) == MultiplicationTask(min_digits=2, max_digits=4, seed=3).train_example(7)


def test_validation_is_disjoint_from_train_and_from_addition():
    task = MultiplicationTask(min_digits=1, max_digits=2)
    val = {e.problem for e in task.validation()}
    assert val and not val & {task.train_example(i).problem for i in range(2000)}
    assert not val & {e.problem for e in AdditionTask().validation()}  # "*" vs "+"


def test_texts_round_trip_through_the_task_tokenizer():
    tok = build_task_tokenizer()
    task = MultiplicationTask()
    for i in range(20):
        ex = task.train_example(i)
        for text in (task.prompt(ex), task.demonstration(ex)):
            ids = tok(text).input_ids
            assert tok.unk_token_id not in ids and tok.decode(ids, skip_special_tokens=True) == text
