"""Assert snippets split into a call (sent to the sandbox) and a comparison (kept here)."""

import pytest

from scalerl.data.asserts import AssertFormError, Check, parse_assert


def test_equality_with_literal_arguments_and_keywords():
    c = parse_assert("assert add(2, b=-3) == -1, 'message is ignored'")
    assert (c.func, c.args_src, c.kwargs_src, c.op, c.expected) == ("add", "(2,)", "{'b': -3}", "==", -1)
    assert c.passes(-1) and not c.passes(1) and not c.passes("-1")


def test_reversed_sides_wrappers_and_dotted_names():
    c = parse_assert("assert [1, 2] == sorted(mod.f((2, 1)))")
    assert (c.func, c.args_src, c.wrap, c.expected) == ("mod.f", "((2, 1),)", "sorted", [1, 2])
    assert c.passes([2, 1]) and c.passes((1, 2)) and not c.passes([1])
    s = parse_assert("assert set(f()) == {1, 2}")
    assert s.passes([2, 1, 1]) and not s.passes([[1]])  # unhashable: a failure, not an error


def test_truthiness_identity_and_inequality():
    assert parse_assert("assert is_odd(3)").passes(1) and not parse_assert("assert is_odd(3)").passes([])
    assert parse_assert("assert not is_odd(4)").passes(0)
    is_true = parse_assert("assert f(1) is True")
    assert is_true.passes(True) and not is_true.passes(1)  # identity: 1 is not True
    assert parse_assert("assert f(1) is not None").passes(0)
    assert parse_assert("assert f(1) != 3").passes(4) and not parse_assert("assert f(1) != 3").passes(3)


def test_tolerances():
    c = parse_assert("assert math.isclose(area(2), 12.566, rel_tol=1e-3)")
    assert c.passes(12.5664) and not c.passes(12.6) and not c.passes(True) and not c.passes("12.566")
    a = parse_assert("assert abs(area(2) - 12.566) < 0.01")
    assert a.passes(12.57) and not a.passes(12.58)  # |12.57 - 12.566| = 0.004, |12.58 - 12.566| = 0.014
    assert parse_assert("assert abs(f() - 1) <= 0.5").passes(1.5)


@pytest.mark.parametrize("snippet, why", [
    ("assert False", "not of the form"),
    ("assert f(x) == 1", "argument `x` is not a literal"),
    ("assert f(1) == g(2)", "expected value `g\\(2\\)` is not a literal"),
    ("assert f(*a) == 1", r"\*args"),
    ("x = 1", "single assert"),
    ("assert f(1) is 2", "None, True or False"),
    ("assert (", "not valid Python"),
    ("assert Solution().f(1) == 1", "not of the form"),
])
def test_unsupported_forms_are_rejected_with_a_reason(snippet, why):
    with pytest.raises(AssertFormError, match=why):
        parse_assert(snippet)


def test_plain_data_only_reaches_the_comparison():
    # the parent compares literal_eval output, so a value is list/int/...; any error is a fail
    c = Check("f", "()", "{}", "==", expected=[1])
    assert c.passes([1]) and not c.passes(None)
    deep = []
    for _ in range(100000):
        deep = [deep]
    assert not Check("f", "()", "{}", "==", expected=[1]).passes(deep)
