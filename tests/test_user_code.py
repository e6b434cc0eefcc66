"""Bounded calls into user code (``scalerl.user_code``): a hung call is abandoned at its time
limit, every exception (``BaseException`` included) is contained, and too many calls still
stuck stop the run with one sentence. Hung calls block on an event the test releases, so no
thread outlives its test; only bounds are asserted, never how long anything took."""

from __future__ import annotations

import threading
import time

import pytest

from scalerl import user_code
from scalerl.user_code import CallTimedOut, TooManyStuck, UserCalls, UserCodeFailed, abandon_when


def _wait_unstuck(before: int) -> None:
    deadline = time.monotonic() + 60  # a hang bound, not a speed one
    while user_code.stuck() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert user_code.stuck() == before


def test_a_call_in_time_returns_its_value_and_workers_are_reused():
    calls = UserCalls("test fn", 30.0, "test.timeout_s")
    assert calls.call(lambda a, b: a + b, 2, 3) == 5
    names = {calls.call(lambda: threading.current_thread().name) for _ in range(20)}
    assert names == {"scalerl-user-code"}  # off the caller's thread
    assert threading.current_thread().name != "scalerl-user-code"


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), ValueError("bad")])
@pytest.mark.parametrize("timeout", [30.0, None])
def test_every_exception_of_user_code_is_contained(error, timeout):
    def fn():
        raise error

    with pytest.raises(UserCodeFailed) as caught:
        UserCalls("test fn", timeout, "test.timeout_s").call(fn)
    assert caught.value.error is error and type(error).__name__ in str(caught.value)


def test_a_hung_call_is_abandoned_at_its_limit_and_counted_until_it_returns():
    release, before = threading.Event(), user_code.stuck()
    calls = UserCalls("task.reward_fn r.py:score", 0.2, "task.reward_timeout_s")
    with pytest.raises(CallTimedOut, match=r"task.reward_fn r.py:score ran past its time limit of 0.2 s "
                                           r"\(task.reward_timeout_s\)"):
        calls.call(release.wait)
    assert user_code.stuck() == before + 1
    assert calls.call(lambda: "next") == "next"  # the run goes on
    release.set()
    _wait_unstuck(before)


def test_too_many_stuck_calls_stop_with_one_sentence(monkeypatch):
    release, before = threading.Event(), user_code.stuck()
    monkeypatch.setattr(user_code, "MAX_STUCK", before + 2)
    calls = UserCalls("env.name e.py:Env", 0.05, "env.timeout_s")
    try:
        for _ in range(2):
            with pytest.raises(CallTimedOut):
                calls.call(release.wait)
        with pytest.raises(TooManyStuck) as err:
            calls.call(lambda: 1)
        text = str(err.value)
        assert "\n" not in text and "still running" in text and "env.timeout_s" in text
    finally:
        release.set()
    _wait_unstuck(before)


def test_a_stop_abandons_a_waiting_call_before_its_limit():
    release, before = threading.Event(), user_code.stuck()
    calls = UserCalls("test fn", 10**6, "test.timeout_s")  # the limit would never come
    try:
        with abandon_when(lambda: True), pytest.raises(CallTimedOut, match="abandoned for a stop"):
            calls.call(release.wait)
    finally:
        release.set()
    _wait_unstuck(before)


def test_math_verify_with_its_default_timeouts_runs_on_the_main_thread(capsys):
    """math-verify's ``parse``/``verify`` set SIGALRM timers, which only the main thread may:
    such a reward runs there from its first call on, said once, and scores as written."""
    from math_verify import parse, verify

    def reward(completion):
        return float(verify(parse("$\\frac{1}{2}$"), parse(completion)))

    calls = UserCalls("task.reward_fn r.py:reward", 30.0, "task.reward_timeout_s")
    assert [calls.call(reward, c) for c in ("$0.5$", "$\\frac{2}{4}$", "$3$")] == [1.0, 1.0, 0.0]
    assert calls.inline
    said = capsys.readouterr().err
    assert said.count("sets its own signal timer") == 1 and "task.reward_timeout_s" in said


def test_signal_setting_code_off_the_main_thread_still_fails_as_the_sample_s_error():
    import signal

    def fn():
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    calls = UserCalls("test fn", 30.0, "test.timeout_s")
    outcome = []

    def off_main():
        try:
            calls.call(fn)
        except UserCodeFailed as err:
            outcome.append(err)

    worker = threading.Thread(target=off_main)
    worker.start()
    worker.join()
    assert len(outcome) == 1 and "main thread" in str(outcome[0]) and not calls.inline


def test_a_huge_line_of_a_users_traceback_is_cut():
    from scalerl.user_code import SHOWN_LINE_CHARS, format_failure

    try:
        raise ValueError("x" * 1_000_000)
    except ValueError as err:
        text = format_failure(err)
    last = text.rstrip("\n").splitlines()[-1]
    assert last == f"ValueError: {'x' * (SHOWN_LINE_CHARS - 12)}… (1000012 characters)"
    assert len(text) < 2 * SHOWN_LINE_CHARS + 1000
