"""Assert-style unit tests, parsed in the trainer into a call and an expected value.

A code dataset's function tests look like ``assert add(2, 3) == 5``. Running such a snippet
inside the untrusted program's interpreter lets the program decide its own verdict (rebind
``exec``, return an object whose ``__eq__`` is always true, read the harness's frames). So the
snippet never reaches the program: :func:`parse_assert` splits it with :mod:`ast` into

- a :class:`Check` holding the **call** (a dotted function name and literal arguments), which
  is all the sandboxed child receives; the child returns the call's result as the ``repr`` of
  plain data (None, bool, int, float, str, and lists, tuples, dicts, sets of those), and
- the **comparison** (operator and expected literal), which stays in the trainer and is
  applied by :meth:`Check.passes` to the ``ast.literal_eval`` of that text, which can only
  produce plain data.

Accepted forms, with ``CALL`` = ``f(lit, ..., k=lit)`` (``f`` a name or dotted name) and
``W`` one of the pure wrappers in ``WRAPPERS`` (applied in the trainer):

    assert CALL == LIT        assert W(CALL) == LIT      assert LIT == CALL   (also !=)
    assert CALL               assert not CALL            assert CALL is None / True / False
    assert math.isclose(CALL, LIT[, rel_tol=LIT, abs_tol=LIT])
    assert abs(CALL - LIT) < LIT                          (also <=)

An optional assert message is ignored. Anything else is rejected when the data set is loaded,
so a test that cannot be graded safely is an error, never a silent 0.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any

WRAPPERS = {"set": set, "frozenset": frozenset, "sorted": sorted, "list": list, "tuple": tuple,
            "len": len, "abs": abs, "str": str, "int": int, "float": float, "bool": bool}
"""Functions the trainer may apply to the returned plain data before comparing."""

_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not"}
FORMS = "`assert f(literals) == literal` (or !=, is, not, math.isclose, abs(f(...) - x) < tol)"


class AssertFormError(ValueError):
    """A snippet that is not one of the accepted forms."""


@dataclass(frozen=True)
class Check:
    """One test: call ``func(*args, **kwargs)`` in the sandbox, compare the result here."""

    func: str
    """Dotted name looked up in the program's namespace."""
    args_src: str
    """Source of the positional-argument tuple (literals only), e.g. ``"(2, 3)"``."""
    kwargs_src: str
    """Source of the keyword-argument dict (literals only), e.g. ``"{}"``."""
    op: str
    """``==``, ``!=``, ``is``, ``is not``, ``truthy``, ``falsy``, ``isclose``, ``abs<``, ``abs<=``."""
    expected: Any = None
    wrap: str | None = None
    options: dict = field(default_factory=dict)
    """``isclose``: rel_tol/abs_tol; ``abs<``/``abs<=``: tol."""

    def passes(self, value: Any) -> bool:
        """Whether the returned plain ``value`` satisfies the assert (any error is a failure)."""
        try:
            return self._passes(WRAPPERS[self.wrap](value) if self.wrap else value)
        except (TypeError, ValueError, OverflowError, RecursionError, MemoryError):
            return False

    def _passes(self, v: Any) -> bool:
        if self.op in ("==", "!="):
            return (v == self.expected) is (self.op == "==")
        if self.op in ("is", "is not"):  # None/True/False only: identity on plain data is type + value
            same = type(v) is type(self.expected) and v == self.expected
            return same is (self.op == "is")
        if self.op in ("truthy", "falsy"):
            return bool(v) is (self.op == "truthy")
        if type(v) not in (int, float):  # bool is not a number here
            return False
        if self.op == "isclose":
            return math.isclose(v, self.expected, **self.options)
        gap = abs(v - self.expected)
        return gap < self.options["tol"] if self.op == "abs<" else gap <= self.options["tol"]


def _literal(node: ast.expr, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise AssertFormError(f"{what} `{ast.unparse(node)}` is not a literal") from None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _call(node: ast.expr) -> tuple[str, str, str] | None:
    """(func, args_src, kwargs_src) when ``node`` is a call of a dotted name on literals."""
    if not isinstance(node, ast.Call) or _dotted(node.func) is None:
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise AssertFormError("*args/**kwargs in a test call are not supported")
    for a in [*node.args, *(k.value for k in node.keywords)]:
        _literal(a, "argument")
    args = ast.unparse(ast.Tuple(elts=node.args, ctx=ast.Load()))
    kwargs = ast.unparse(ast.Dict(keys=[ast.Constant(k.arg) for k in node.keywords],
                                  values=[k.value for k in node.keywords]))
    return _dotted(node.func), args if node.args else "()", kwargs


def _subject(node: ast.expr) -> tuple[tuple[str, str, str], str | None] | None:
    """The call under test and the wrapper around it, if ``node`` is ``CALL`` or ``W(CALL)``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in WRAPPERS
            and len(node.args) == 1 and not node.keywords):
        inner = _call(node.args[0])
        if inner is not None:
            return inner, node.func.id
    call = _call(node)
    return (call, None) if call is not None else None


def _compare(test: ast.Compare) -> Check | None:
    if len(test.ops) != 1 or type(test.ops[0]) not in _OPS and type(test.ops[0]) not in (ast.Lt, ast.LtE):
        return None
    left, right, op = test.left, test.comparators[0], test.ops[0]
    if isinstance(op, (ast.Lt, ast.LtE)):  # abs(CALL - LIT) < TOL
        if (isinstance(left, ast.Call) and _dotted(left.func) == "abs" and len(left.args) == 1
                and isinstance(left.args[0], ast.BinOp) and isinstance(left.args[0].op, ast.Sub)):
            call = _call(left.args[0].left)
            if call is not None:
                return Check(*call, op="abs<" if isinstance(op, ast.Lt) else "abs<=",
                             expected=_literal(left.args[0].right, "expected value"),
                             options={"tol": _literal(right, "tolerance")})
        return None
    subject = _subject(left)
    if subject is None and isinstance(op, (ast.Eq, ast.NotEq)):
        subject, right = _subject(right), left
    if subject is None:
        return None
    expected = _literal(right, "expected value")
    if _OPS[type(op)] in ("is", "is not") and expected not in (None, True, False):
        raise AssertFormError("`is` tests compare with None, True or False only")
    return Check(*subject[0], op=_OPS[type(op)], expected=expected, wrap=subject[1])


def _isclose(test: ast.Call) -> Check | None:
    if _dotted(test.func) not in ("math.isclose", "isclose") or len(test.args) != 2:
        return None
    call = _call(test.args[0])
    if call is None:
        return None
    options = {k.arg: _literal(k.value, k.arg) for k in test.keywords}
    if set(options) - {"rel_tol", "abs_tol"}:
        raise AssertFormError("math.isclose takes only rel_tol and abs_tol here")
    return Check(*call, op="isclose", expected=_literal(test.args[1], "expected value"), options=options)


def parse_assert(snippet: str) -> Check:
    """The :class:`Check` of one ``assert`` snippet; :class:`AssertFormError` if unsupported."""
    try:
        tree = ast.parse(snippet.strip())
    except SyntaxError as e:
        raise AssertFormError(f"not valid Python ({e.msg})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise AssertFormError(f"expected a single assert statement of the form {FORMS}")
    test = tree.body[0].test
    check = None
    if isinstance(test, ast.Compare):
        check = _compare(test)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        subject = _subject(test.operand)
        check = Check(*subject[0], op="falsy", wrap=subject[1]) if subject else None
    elif isinstance(test, ast.Call):
        check = _isclose(test)
        if check is None:
            subject = _subject(test)
            check = Check(*subject[0], op="truthy", wrap=subject[1]) if subject else None
    if check is None:
        raise AssertFormError(f"`{ast.unparse(test)}` is not of the form {FORMS}")
    return check
