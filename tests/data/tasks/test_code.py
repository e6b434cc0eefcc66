import json

import pytest

import scalerl.data.results as results
from scalerl.data.sandbox import SandboxLimits
from scalerl.data.tasks import get_task
from scalerl.data.tasks.base import Example
from scalerl.data.tasks.code import code_reward, extract_program, normalize_tests, score

DOUBLE_IO = normalize_tests([{"input": "2\n", "output": "4\n"}, {"input": "5\n", "output": "10"}])
ADD_ASSERTS_SRC = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
ADD_ASSERTS = normalize_tests(json.dumps(ADD_ASSERTS_SRC))
FAST = SandboxLimits(timeout_s=2.0)

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial


def _ex(tests):
    return Example(id=0, problem="p", answer="", meta={"tests": tests})


def _fenced(code):
    return f"<think> easy </think> Here:\n```python\n{code}\n```"


def test_extract_program_takes_the_last_fence_after_thinking():
    text = "<think> ```python\nbad()\n``` </think>\n```python\nx = 1\n```\n```py\ny = 2\n```"
    assert extract_program(text) == "y = 2\n"
    assert extract_program("<think> t </think>print(1)") == "print(1)"
    assert extract_program("<think> never closed ```python\nprint(1)\n```") == ""


def test_io_tests_score_fraction_and_all_or_nothing():
    ex = _ex(DOUBLE_IO)
    assert code_reward(_fenced("print(int(input()) * 2)"), ex, limits=FAST) == 1.0
    # 2 -> 4 passes, 5 -> 9 fails: half the tests.
    half = _fenced("n = int(input())\nprint(4 if n == 2 else 9)")
    assert code_reward(half, ex, limits=FAST) == 0.5
    assert code_reward(half, ex, all_tests=True, limits=FAST) == 0.0
    assert code_reward("<think> no answer", ex, limits=FAST) == 0.0


def test_assert_tests_and_a_crashing_program():
    ex = _ex(ADD_ASSERTS)
    assert code_reward(_fenced("def add(a, b):\n    return a + b"), ex, limits=FAST) == 1.0
    assert code_reward(_fenced("def add(a, b):\n    return a * b"), ex, limits=FAST) == 0.0
    assert code_reward(_fenced("raise SystemExit(0)"), ex, limits=FAST) == 0.0


def test_timeout_scores_zero():
    assert code_reward(_fenced("while True: pass"), _ex(DOUBLE_IO),
                       limits=SandboxLimits(timeout_s=0.5)) == 0.0


def test_apps_style_tests_and_bad_tests_are_explained():
    t = normalize_tests({"inputs": ["1\n"], "outputs": ["1\n"]})
    assert t == {"kind": "io", "cases": [("1\n", "1\n")]}
    with pytest.raises(ValueError, match="rec 3: tests must be"):
        normalize_tests([], "rec 3")
    with pytest.raises(ValueError, match="needs 'input' and 'output'"):
        normalize_tests([{"input": "1"}])


def test_code_task_from_jsonl_with_demonstrations(tmp_path):
    rows = [{"q": f"print {i} times two", "t": [{"input": "", "output": str(2 * i)}],
             "s": f"print({2 * i})"} for i in range(6)]
    path = tmp_path / "code.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    task = get_task("code", path=path, problem_field="q", tests_field="t", solution_field="s",
                    num_validation=2, limits=FAST)
    assert task.num_train == 4 and len(task.validation()) == 2
    ex = task.train_example(0)
    assert ex.problem in task.prompt(ex)
    assert task.reward(task.demonstration(ex), ex) == 1.0
    assert task.reward(_fenced("print(-1)"), ex) == 0.0


def test_sandbox_limits_from_a_recipe_mapping(tmp_path, capsys):
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"problem": "p", "tests": ["assert f() == 1"]}) + "\n")
    task = get_task("code", path=path, num_validation=0, limits={"timeout_s": 1.5, "disk_mb": 8})
    assert task.limits == SandboxLimits(timeout_s=1.5, disk_mb=8)
    with pytest.raises(ValueError, match=r"task\.knobs\.limits: unknown field\(s\) \['timeout'\]"):
        get_task("code", path=path, num_validation=0, limits={"timeout": 1})
    for bad, message in [({"timeout_s": "5"}, r"limits\.timeout_s must be a positive number; got '5'"),
                         ({"memory_mb": 0}, r"limits\.memory_mb must be a positive integer"),
                         ({"memory_mb": 1.5}, r"limits\.memory_mb must be a positive integer"),
                         ({"namespaces": "no"}, r"limits\.namespaces must be true or false")]:
        with pytest.raises(ValueError, match=message):
            get_task("code", path=path, num_validation=0, limits=bad)
    assert get_task("code", path=path, num_validation=0, limits={"parallel": 0, "timeout_s": 2}).limits.parallel == 0


def test_assert_tests_that_cannot_be_graded_safely_fail_at_load(tmp_path):
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"problem": "p", "tests": ["assert f(x) == 1"]}) + "\n")
    with pytest.raises(ValueError, match=r"code.jsonl:1: test 0 .*argument `x` is not a literal"):
        get_task("code", path=path, num_validation=0)


def test_an_expected_value_no_program_can_match_fails_at_load_naming_the_test(tmp_path):
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"problem": "p", "tests": ["assert f() == 1", "assert f() == [...]"]}) + "\n")
    with pytest.raises(ValueError, match=r"code.jsonl:1: test 1 .*\[\.\.\.\].*cannot be graded"):
        get_task("code", path=path, num_validation=0)


# probe F18/F19: a program that writes junk to every descriptor made the trainer raise
JUNK_WRITER = ("import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, {line!r}.encode())\n"
               "    except OSError:\n        pass\ndef add(a, b):\n    return a + b\nprint(input())")


@pytest.mark.parametrize("line", ["\u00b2\t1\n", "9" * 5000 + "\t1\n"])
def test_junk_on_the_results_channel_scores_zero_counted_and_logged_once(tmp_path, capsys, line):
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"problem": "p", "tests": ADD_ASSERTS_SRC}) + "\n"
                    + json.dumps({"problem": "q", "tests": [{"input": "1", "output": "1"}]}) + "\n")
    task = get_task("code", path=path, num_validation=0, limits=FAST)
    capsys.readouterr()
    program = _fenced(JUNK_WRITER.format(line=line))
    assert task.reward(program, task.train_example(0)) == 0.0  # calls mode
    assert task.reward(program, task.train_example(1)) == 0.0  # io mode: the same channel
    assert task.reward(_fenced("def add(a, b):\n    return a + b"), task.train_example(0)) == 1.0
    assert task.reward_errors == 2 and capsys.readouterr().err.count("malformed results") == 1


def test_a_900_kb_malformed_value_makes_a_short_log_line(tmp_path, capsys):
    # probe N6: the error quoted the whole 900 KB tag, printed on one line of the run log
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"problem": "p", "tests": ADD_ASSERTS_SRC}) + "\n")
    task = get_task("code", path=path, num_validation=0, limits=FAST)
    capsys.readouterr()
    program = JUNK_WRITER.replace("{line!r}.encode()", "b'0\\t[\"' + b'Z' * 900_000 + b'\",1]\\n'")
    assert task.reward(_fenced(program), task.train_example(0)) == 0.0
    err = capsys.readouterr().err
    assert task.reward_errors == 1 and "malformed" in err and max(len(line) for line in err.splitlines()) < 1000


def test_values_over_the_comparison_budget_score_zero_with_a_reason(monkeypatch):
    ticks = iter(range(10 ** 9))  # a CPU clock that advances one second per reading
    monkeypatch.setattr(results, "_cpu_clock", lambda: float(next(ticks)))
    program = "def uniq(xs):\n    return set(range(1000))"
    value, error = score(_fenced(program), _ex(normalize_tests(["assert uniq([1]) == {1}"])), limits=FAST)
    assert value == 0.0 and "trainer CPU" in error


def test_ints_past_4300_digits_work_as_arguments_and_expected_values():
    tests = normalize_tests([f"assert double({hex(1 << 16000)}) == {hex(1 << 16001)}"])
    assert code_reward(_fenced("def double(n):\n    return 2 * n"), _ex(tests), limits=FAST) == 1.0
    assert code_reward(_fenced("def double(n):\n    return 2 * n + 1"), _ex(tests), limits=FAST) == 0.0


def test_a_bad_test_holding_a_huge_int_is_one_short_sentence():
    with pytest.raises(ValueError, match="is not of the form") as e:
        normalize_tests([f"assert f() < {hex(1 << 16000)}"])
    assert len(str(e.value)) < 600 and "characters)" in str(e.value)
