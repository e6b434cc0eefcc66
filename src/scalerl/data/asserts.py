"""Assert-style unit tests, parsed in the trainer into a call and an expected value.

A code dataset's function tests look like ``assert add(2, 3) == 5``. Running such a snippet
inside the untrusted program's interpreter lets the program decide its own verdict (rebind
``exec``, return an object whose ``__eq__`` is always true, read the harness's frames). So the
snippet never reaches the program: :func:`parse_assert` splits it with :mod:`ast` into

- a :class:`Check` holding the **call** (a dotted function name and literal arguments) and the
  name of its **wrapper**, which is all the sandboxed child receives; the child makes the call,
  applies the wrapper there with its own saved builtins (so ``list(gen())``, ``len(range(5))``
  and ``sorted(d.keys())`` see the real iterator), and sends the result back as tagged plain
  data (``scalerl.data.results``), and
- the **comparison** (operator and expected literal), which stays in the trainer and is
  applied by :meth:`Check.passes` to the decoded data, through canonical keys that compare as
  Python's ``==`` does (``Fraction(1, 2) == 0.5``, ``Decimal('0.1') != 0.1``, ``2 + 0j == 2``,
  a NaN equals nothing).

Accepted forms, with ``CALL`` = ``f(lit, ..., k=lit)`` (``f`` a name or dotted name) and
``W`` one of the builtins in ``WRAPPERS`` (applied in the sandbox, to the call's result):

    assert CALL == LIT        assert W(CALL) == LIT      assert LIT == CALL   (also !=)
    assert CALL               assert not CALL            assert CALL is None / True / False
    assert math.isclose(CALL, LIT[, rel_tol=LIT, abs_tol=LIT])
    assert abs(CALL - LIT) < LIT                          (also <=)

``LIT`` is what ``ast.literal_eval`` reads (numbers, including complex and ``1e999`` for
infinity; str, bytes, None, bools; lists, tuples, dicts, sets) or ``float('inf')``,
``float('-inf')``, ``float('nan')``. ``...`` is refused: no program value can equal it here.
An optional assert message is ignored. Anything else is rejected when the data set is loaded,
so a test that cannot be graded safely is an error, never a silent 0.
"""

from __future__ import annotations

import ast
import copy
import math
from dataclasses import dataclass, field
from typing import Any

from scalerl.data.results import CostError, Meter, WireError, canonical, is_number, shorten

WRAPPERS = frozenset({"set", "frozenset", "sorted", "list", "tuple", "dict", "len", "abs", "str",
                      "int", "float", "bool", "sum", "min", "max"})
"""Builtins the sandboxed child may apply to a call's result before sending it back
(``sandbox.boot._WRAPPERS`` holds the child's saved references, by the same names)."""

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
    key: tuple | None = field(default=None, init=False, repr=False, compare=False)
    """``canonical(expected)`` for ``==``/``!=``, computed once at load."""

    def __post_init__(self) -> None:
        if self.wrap is not None and self.wrap not in WRAPPERS:
            raise AssertFormError(f"`{self.wrap}` is not a wrapper the sandbox applies")
        if self.op in ("==", "!="):
            try:
                object.__setattr__(self, "key", canonical(self.expected))
            except (WireError, RecursionError):
                raise AssertFormError(f"expected value `{_brief(self.expected, 60)}` cannot be graded") from None

    def passes(self, value: Any, meter: Meter | None = None) -> bool:
        """Whether ``value``, the call's decoded result with the wrapper already applied in the
        sandbox, satisfies the assert. Any error is a failure, never an exception: the value
        was shaped by the program. The one exception is :class:`CostError`: ``meter`` (one per
        completion; a fresh :class:`Meter` by default) bounds the trainer CPU the comparison
        takes, and a value over it is an error the grader reports, not a quiet 0."""
        try:
            return self._passes(value, Meter() if meter is None else meter)
        except CostError:
            raise
        except Exception:  # noqa: BLE001 - TypeError, OverflowError, RecursionError, decimal signals
            return False

    def _passes(self, v: Any, meter: Meter) -> bool:
        if self.op in ("==", "!="):
            return (canonical(v, meter) == self.key) is (self.op == "==")
        if self.op in ("is", "is not"):  # None/True/False only: identity on plain data is type + value
            same = type(v) is type(self.expected) and v == self.expected
            return same is (self.op == "is")
        if self.op in ("truthy", "falsy"):
            return bool(v) is (self.op == "truthy")
        if not is_number(v):
            return False
        if self.op == "isclose":
            return math.isclose(v, self.expected, **self.options)
        gap = abs(v - self.expected)
        return gap < self.options["tol"] if self.op == "abs<" else gap <= self.options["tol"]


class _HexInt(int):
    """An int that ``ast.unparse`` writes in hex: it writes ``repr``, which raises past 4300
    decimal digits, while a hex literal of any size parses in linear time (in the sandbox's
    ``literal_eval`` too)."""

    def __repr__(self) -> str:
        return hex(self)


class _BigIntsInHex(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) is int and node.value.bit_length() > 2000:
            return ast.Constant(_HexInt(node.value))
        return node


def _source(node: ast.AST) -> str:
    """``ast.unparse(node)``, with ints of more than 2000 bits written in hex."""
    return ast.unparse(_BigIntsInHex().visit(copy.deepcopy(node)))


def _shown(node: ast.AST) -> str:
    """A node's source for a message, cut to a readable length."""
    return shorten(_source(node), 200)


def _brief(value: Any, limit: int) -> str:
    """``repr(value)`` for a message, cut to ``limit``; a type name if repr raises (an int of
    more than 4300 digits inside it)."""
    try:
        return shorten(repr(value), limit)
    except ValueError:
        return f"a {type(value).__name__}"


class _NonFinite(ast.NodeTransformer):
    """``float('inf')``, ``float('-inf')``, ``float('nan')`` as constants: the one call form a
    literal may hold, since nan has no literal at all."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if (isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1
                and not node.keywords and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in ("inf", "-inf", "nan", "infinity", "-infinity")):
            return ast.Constant(float(node.args[0].value))
        return node


def _literal(node: ast.expr, what: str) -> Any:
    try:
        return ast.literal_eval(_NonFinite().visit(copy.deepcopy(node)))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise AssertFormError(f"{what} `{_shown(node)}` is not a literal") from None


def _number(node: ast.expr, what: str, complex_ok: bool = False) -> Any:
    """A literal that a tolerance form can use (a str there would fail every program)."""
    value = _literal(node, what)
    if type(value) not in ((int, float, complex) if complex_ok else (int, float)):
        raise AssertFormError(f"{what} `{_shown(node)}` is not a number")
    return value


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
    args = _source(ast.Tuple(elts=node.args, ctx=ast.Load()))
    kwargs = _source(ast.Dict(keys=[ast.Constant(k.arg) for k in node.keywords],
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
                             expected=_number(left.args[0].right, "expected value", complex_ok=True),
                             options={"tol": _number(right, "tolerance")})
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
    options = {k.arg: _number(k.value, k.arg) for k in test.keywords}
    if set(options) - {"rel_tol", "abs_tol"}:
        raise AssertFormError("math.isclose takes only rel_tol and abs_tol here")
    return Check(*call, op="isclose", expected=_number(test.args[1], "expected value"), options=options)


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
        raise AssertFormError(f"`{_shown(test)}` is not of the form {FORMS}")
    return check
