"""Assert snippets split into a call (sent to the sandbox) and a comparison (kept here)."""

from decimal import Decimal
from fractions import Fraction

import pytest

from scalerl.data.asserts import AssertFormError, Check, parse_assert
from scalerl.data.results import WireDict, WireSet

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial


def test_equality_with_literal_arguments_and_keywords():
    c = parse_assert("assert add(2, b=-3) == -1, 'message is ignored'")
    assert (c.func, c.args_src, c.kwargs_src, c.op, c.expected) == ("add", "(2,)", "{'b': -3}", "==", -1)
    assert c.passes(-1) and not c.passes(1) and not c.passes("-1")


def test_reversed_sides_wrappers_and_dotted_names():
    # the wrapper is applied in the sandbox: passes() sees its result, and compares as Python
    c = parse_assert("assert [1, 2] == sorted(mod.f((2, 1)))")
    assert (c.func, c.args_src, c.wrap, c.expected) == ("mod.f", "((2, 1),)", "sorted", [1, 2])
    assert c.passes([1, 2]) and not c.passes([2, 1]) and not c.passes((1, 2)) and not c.passes([1])
    s = parse_assert("assert set(f()) == {1, 2}")
    assert s.passes(WireSet((2, 1))) and s.passes({1.0, 2}) and not s.passes([1, 2])


def test_equality_is_pythons_across_numeric_and_container_types():
    half = parse_assert("assert f() == 0.5")
    assert half.passes(Fraction(1, 2)) and half.passes(Decimal("0.5")) and half.passes(0.5 + 0j)
    tenth = parse_assert("assert f() == 0.1")
    assert not tenth.passes(Decimal("0.1")) and not tenth.passes(Fraction(1, 10))  # exact values differ
    assert parse_assert("assert f() == 1").passes(True) and parse_assert("assert f() == (1, 2)").passes((1.0, 2))
    assert not parse_assert("assert f() == [1, 2]").passes((1, 2))  # a list is never a tuple
    d = parse_assert("assert f() == {'a': {1}, 2: [None]}")
    assert d.passes(WireDict(((2.0, [None]), ("a", WireSet((1,), frozen=True)))))
    assert not d.passes(WireDict((("a", WireSet((1,))),)))
    assert not d.passes(WireDict((("a", WireSet((1,))), (2, [None]), (2.0, [None]))))  # a repeated key
    nan = float("nan")
    assert not parse_assert("assert f() == float('nan')").passes(nan)  # as in Python: nan != nan
    assert parse_assert("assert f() != float('nan')").passes(nan)
    assert not parse_assert("assert f() == [1e999]").passes([nan]) and parse_assert("assert f() == 1e999").passes(
        float("inf"))
    assert parse_assert("assert f() == 1j").passes(1j) and parse_assert("assert f() == b'ab'").passes(b"ab")
    assert not parse_assert("assert f() == b'ab'").passes("ab")


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
    assert c.passes(Fraction(12566, 1000)) and not c.passes(WireSet((12.566,)))
    assert not parse_assert("assert abs(f() - 0.1) < 1").passes(Decimal("0.1"))  # TypeError in Python too
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
    ("assert f() == ...", "cannot be graded"),
    ("assert f() == float('1.5')", "not a literal"),
    ("assert math.isclose(f(), '1')", "not a number"),
    ("assert abs(f() - 1) < 1j", "tolerance `1j` is not a number"),
])
def test_unsupported_forms_are_rejected_with_a_reason(snippet, why):
    with pytest.raises(AssertFormError, match=why):
        parse_assert(snippet)


def test_plain_data_only_reaches_the_comparison():
    # the parent compares decoded wire data, so a value is list/int/...; any error is a fail
    c = Check("f", "()", "{}", "==", expected=[1])
    assert c.passes([1]) and not c.passes(None) and not c.passes(object())
    with pytest.raises(AssertFormError, match="cannot be graded"):
        Check("f", "()", "{}", "==", expected=[Ellipsis])
    deep = []
    for _ in range(100000):
        deep = [deep]
    assert not Check("f", "()", "{}", "==", expected=[1]).passes(deep)
