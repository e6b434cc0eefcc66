"""The results channel: what a sandboxed call returned, decoded in bounded time, compared as
Python compares.

The channel is written by a process that runs the policy's program, so every byte of it may
be hostile: a forged line, a 5000-digit index, a megabyte-long set whose elements all hash
alike (rebuilding it as a Python ``set`` costs seconds of quadratic trainer CPU). So the
trainer never evaluates the text and never hashes what it holds:

- each line is ``index<TAB>json``, ASCII only; the JSON is a strict grammar with explicit
  type tags (below), parsed by ``json.loads`` (linear) after a size cap, with a cap on the
  digits of every number, then walked with caps on nodes and depth;
- sets and dicts come back as :class:`WireSet` / :class:`WireDict`, tuples of their items,
  and equality is decided on :func:`canonical` keys: sorted, never hashed;
- a real number's key is its reduced fraction ``(p, q)``, computed without a general gcd
  for a Decimal (powers of ten are cached; only factors of 2 and 5 can be shared), so keys
  compare as cheap integer tuples; the probe's set of 45k ``Decimal('kE±4000')`` cost 4.7
  trainer CPU-s as ``Fraction`` keys compared by big multiplications (N4). What a hostile
  value can still cost is capped: comparing under a :class:`Meter` stops at ``budget_s``
  of trainer CPU with :class:`CostError`, which the grader reports like a malformed channel.

A channel that breaks the grammar anywhere was written by the program, not by the harness,
so the whole run counts as failed and the caller is told why (``reward_errors``).

Wire grammar (``sandbox.boot._plain_repr`` writes it)::

    null | true | false | INT | FLOAT | "str"
    ["l", v...]  list            ["t", v...]  tuple
    ["s", v...]  set             ["f", v...]  frozenset
    ["d", k, v, k, v...]  dict   ["F", "inf" | "-inf" | "nan"]  non-finite float
    ["c", re, im]  complex       ["b", "hex"]  bytes
    ["q", num, den]  Fraction    ["D", "str(decimal)"]  Decimal
    ["x", "hex"]  int of more than 2000 bits (any size: hex text converts in linear time,
                  where decimal text is quadratic and capped at 4300 digits by Python)

A line whose body is ``!`` is a call that raised or returned what has no wire form.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import time
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

MAX_BYTES = 8 << 20
"""Ceiling on the channel the decoder reads, whatever the sandbox's output cap."""
MAX_NODES = 1_000_000
MAX_DEPTH = 100
MAX_DIGITS = 4300
"""Digits of one integer (Python's own default cap on int <-> str)."""
HEX_PART_DIGITS = 3600
"""Hex digits of a Fraction's numerator or denominator (about 4300 decimal digits): its
decoding reduces by a gcd, whose cost grows with the square of the size."""
COMPARE_CPU_S = 1.0
"""Trainer CPU that comparing one completion's values may take (:class:`Meter`)."""
SHOWN_CHARS = 300
"""Characters of a program-chosen text (an error naming a value) shown in the run log."""
_INDEX_DIGITS = 7
_DECIMAL = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:E[-+]?\d+)?|-?(?:Infinity|s?NaN\d*)", re.ASCII)
_HEX = re.compile(r"-?[0-9a-f]+", re.ASCII)
_NUMBERS = (bool, int, float, complex, Fraction, Decimal)
_DIGIT_TEXT = bytes.maketrans(bytes(range(10)), b"0123456789")
_INF = float("inf")
_nan_ids = itertools.count()


class WireError(ValueError):
    """Results text outside the grammar or its caps, or a value with no canonical form."""


class CostError(WireError):
    """A value that took the trainer more than its CPU budget to compare."""


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters with a marker of its length: an error that quotes
    a program's value must not put a megabyte on one line of the run log (probe N6)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class Meter:
    """A CPU budget for the trainer's work on one completion's values.

    ``tick()`` is called per node and per costly step; every 64 ticks it reads this thread's
    CPU clock and raises :class:`CostError` once ``budget_s`` is spent. A budget of None never
    runs out (expected values, which the data set's author wrote)."""

    __slots__ = ("budget_s", "deadline", "ticks")

    def __init__(self, budget_s: float | None = COMPARE_CPU_S) -> None:
        self.budget_s, self.ticks = budget_s, 0
        self.deadline = None if budget_s is None else _cpu_clock() + budget_s

    def tick(self, weight: int = 1) -> None:
        self.ticks += weight
        if self.ticks >= 64:
            self.ticks = 0
            if self.deadline is not None and _cpu_clock() > self.deadline:
                raise CostError(f"comparing the returned value took over {self.budget_s:g} s of "
                                "trainer CPU (a value this costly to compare scores as an error)")


def _cpu_clock() -> float:
    return time.thread_time()


@dataclass(frozen=True, eq=False)
class WireSet:
    """A set or frozenset from the channel: its items, never rebuilt into a hashed set."""

    items: tuple
    frozen: bool = False

    def __len__(self) -> int:
        return len(self.items)

    def __eq__(self, other: object) -> bool:
        return _equal(self, other)

    __hash__ = None  # type: ignore[assignment]  # a set is unhashable; a key uses canonical()


@dataclass(frozen=True, eq=False)
class WireDict:
    """A dict (or Counter, OrderedDict, defaultdict) from the channel: its (key, value) pairs."""

    items: tuple

    def __len__(self) -> int:
        return len(self.items)

    def __eq__(self, other: object) -> bool:
        return _equal(self, other)

    __hash__ = None  # type: ignore[assignment]


def _equal(a: Any, b: Any) -> bool:
    try:
        return canonical(a) == canonical(b)
    except (WireError, RecursionError):
        return False


def _sorted_unique(keys, meter: Meter) -> tuple:
    """Sorted keys without repeats: a set's canonical form, in n log n comparisons."""
    out: list = []
    for k in sorted(keys):
        if not out or out[-1] != k:
            out.append(k)
    meter.tick(64)
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _pow10(k: int) -> int:
    return 10 ** k


def _decimal_ratio(x: Decimal, meter: Meter) -> tuple[int, int]:
    """A finite Decimal as a reduced fraction ``(p, q)``. ``c * 10**e`` with ``c`` stripped of
    trailing zeros shares with ``10**k`` only factors 2 or 5, never both, so a shift or a few
    small divisions reduce it (``Fraction(x)`` multiplies and divides 4000-digit numbers)."""
    sign, digits, e = x.as_tuple()
    n = len(digits)
    meter.tick(1 + ((n + abs(e)) >> 9))
    if digits[-1] == 0:  # trailing zeros (or zero itself): stripped
        end = n
        while end > 1 and digits[end - 1] == 0:
            end -= 1
        if end == 1 and digits[0] == 0:
            return 0, 1
        digits, e, n = digits[:end], e + n - end, end
    c = int(bytes(digits).translate(_DIGIT_TEXT)) if n <= 4000 else int(Decimal((0, digits, 0)))
    if sign:
        c = -c
    if e >= 0:
        return c * _pow10(e), 1
    q = _pow10(-e)
    if not c & 1:  # even, so not a multiple of 5
        twos = min((c & -c).bit_length() - 1, -e)
        return c >> twos, q >> twos
    if c % 5:
        return c, q
    fives = 0
    while fives < -e and c % 5 == 0:
        c //= 5
        fives += 1
        meter.tick(1 + (n >> 8))
    return c, q // 5 ** fives


def _real_key(x: Any, meter: Meter) -> tuple:
    """A real number as Python compares it, by exact value across int, float, Fraction and
    Decimal (so Decimal('0.1') != 0.1 and Fraction(1, 2) == 0.5): ``("n", p, q)`` its reduced
    fraction, ``("I", ±1)`` an infinity; NaN equals nothing."""
    t = type(x)
    if t is int or t is bool:
        return ("n", int(x), 1)
    if t is Fraction:
        return ("n", x.numerator, x.denominator)
    if t is Decimal:
        if x.is_nan():
            return ("~", next(_nan_ids))
        if x.is_infinite():
            return ("I", -1 if x.is_signed() else 1)
        return ("n", *_decimal_ratio(x, meter))
    if x != x:  # a float NaN
        return ("~", next(_nan_ids))
    if x in (_INF, -_INF):
        return ("I", 1 if x > 0 else -1)
    return ("n", *x.as_integer_ratio())


def canonical(v: Any, meter: Meter | None = None) -> tuple:
    """A totally ordered key with ``canonical(a) == canonical(b)`` exactly when Python's
    ``a == b`` (NaN anywhere makes a value equal to nothing, itself included): the trainer
    compares through it, so no set or dict of program-chosen hashes is ever built. Keys of
    different kinds are ordered by their tags, so the order is not numeric, only total.
    ``meter`` bounds the trainer CPU it may take (:class:`CostError`); None: no bound."""
    return _key(v, Meter(None) if meter is None else meter)


def _key(v: Any, meter: Meter) -> tuple:
    meter.ticks += 1
    if meter.ticks >= 64:
        meter.tick(0)
    t = type(v)
    if t is str:
        return ("s", v)
    if t is int:
        return ("n", v, 1)
    if v is None:
        return ("0",)
    if t in (bool, float, Fraction, Decimal):
        return _real_key(v, meter)
    if t is complex:
        if v.imag == 0:  # 2+0j == 2
            return _real_key(v.real, meter)
        if v != v:
            return ("~", next(_nan_ids))
        return ("c", v.real, v.imag)
    if t is bytes:
        return ("b", v)
    if t is list or t is tuple:
        return ("l" if t is list else "t", tuple(_key(x, meter) for x in v))
    if t in (set, frozenset, WireSet):
        return ("S", _sorted_unique((_key(x, meter) for x in (v.items if t is WireSet else v)), meter))
    if t is dict or t is WireDict:
        pairs = sorted(((_key(k, meter), _key(x, meter)) for k, x in (v.items if t is WireDict else v.items())),
                       key=lambda kv: kv[0])
        meter.tick(64)
        if any(a[0] == b[0] for a, b in zip(pairs, pairs[1:])):
            raise WireError("a dict with a repeated key")
        return ("d", tuple(pairs))
    raise WireError(f"a {t.__name__} value cannot be graded")


def is_number(v: Any) -> bool:
    """A number of the kinds the tolerance forms accept (bool included, as in Python)."""
    return type(v) in _NUMBERS


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise WireError(f"an integer of more than {MAX_DIGITS} digits")
    return int(text)


def _refuse_constant(name: str) -> Any:
    raise WireError(f"bare {name} (non-finite floats are tagged)")


def _refuse_object(pairs: list) -> Any:
    raise WireError("a JSON object (dicts are tagged lists)")


def _check_shape(tree: Any) -> None:
    """Node count and depth, iteratively: the builder below may then recurse."""
    stack, nodes = [(tree, 0)], 0
    while stack:
        node, depth = stack.pop()
        nodes += 1  # a list, or the root; scalars are counted with their parent below
        if depth > MAX_DEPTH or nodes > MAX_NODES:
            break
        if type(node) is list and node:
            lists = [x for x in node if type(x) is list]
            nodes += len(node) - len(lists)
            if depth + 1 > MAX_DEPTH:
                break
            stack.extend((x, depth + 1) for x in lists)
    else:
        if nodes <= MAX_NODES:
            return
    raise WireError(f"more than {MAX_NODES} values or {MAX_DEPTH} levels")


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included (unrolled: linear)


def _check_nesting(text: str) -> None:
    """Refuse more than ``MAX_DEPTH`` levels of brackets before ``json.loads`` sees the text.

    ``json``'s C parser recurses once per level and stops only at the interpreter's recursion
    limit, which any code in the trainer may raise (a test, a library: ``sys.setrecursionlimit``),
    and past the C stack that is a crash, not an error. So depth is counted here, on the text
    with its strings taken out (a bracket inside a string is no level): +1 per ``[``/``{``,
    −1 per ``]``/``}``, vectorised, linear in the text."""
    import numpy as np

    bare = _STRING.sub("", text).encode("utf-8", "surrogatepass")
    codes = np.frombuffer(bare, dtype=np.uint8)
    steps = (codes == ord("[")).view(np.int8) + (codes == ord("{")) - (codes == ord("]")) - (codes == ord("}"))
    if steps.size and int(np.cumsum(steps, dtype=np.int32).max()) > MAX_DEPTH + 1:
        raise WireError(f"values nested more than {MAX_DEPTH} levels deep")


def _finite_or_tagged(node: Any) -> float:
    value, _ = _build(node)
    if type(value) is not float:
        raise WireError("a complex part that is not a float")
    return value


def _build(node: Any) -> tuple[Any, bool]:
    """(value, hashable) of one checked JSON node."""
    if node is None or type(node) in (bool, int, float, str):
        return node, True
    if type(node) is not list or not node or type(node[0]) is not str:
        raise WireError("an untagged value")
    tag, rest = node[0], node[1:]
    if tag in ("l", "t", "s", "f", "d"):
        built = [_build(x) for x in rest]
        values = tuple(v for v, _ in built)
        if tag == "l":
            return list(values), False
        if tag == "t":
            return values, all(h for _, h in built)
        if tag == "d":
            if len(built) % 2 or not all(h for _, h in built[::2]):
                raise WireError("a dict with an odd item count or an unhashable key")
            return WireDict(tuple(zip(values[::2], values[1::2]))), False
        if not all(h for _, h in built):
            raise WireError("a set holding an unhashable value")
        return WireSet(values, frozen=tag == "f"), tag == "f"
    return _scalar(tag, rest), True


def _scalar(tag: str, rest: list) -> Any:
    """The tagged scalars: non-finite floats, complex, bytes, Fraction, Decimal."""
    if tag == "F" and rest in (["inf"], ["-inf"], ["nan"]):
        return float(rest[0])
    if tag == "c" and len(rest) == 2:
        return complex(_finite_or_tagged(rest[0]), _finite_or_tagged(rest[1]))
    if tag == "b" and len(rest) == 1 and type(rest[0]) is str:
        return bytes.fromhex(rest[0])
    if tag == "x" and len(rest) == 1 and type(rest[0]) is str and _HEX.fullmatch(rest[0]):
        return int(rest[0], 16)
    if tag == "q" and len(rest) == 2:
        num, den = (_fraction_part(x) for x in rest)
        if num is not None and den is not None and den > 0:
            return Fraction(num, den)
    if tag == "D" and len(rest) == 1 and type(rest[0]) is str and len(rest[0]) <= 2 * MAX_DIGITS:
        if _DECIMAL.fullmatch(rest[0]):
            d = Decimal(rest[0])
            if not d.is_finite() or abs(d.as_tuple().exponent) <= MAX_DIGITS:
                return d
    raise WireError(f"a malformed {shorten(repr(tag), 40)} value")


def _fraction_part(node: Any) -> int | None:
    """A Fraction's numerator or denominator: a JSON int, or a hex-tagged one of at most
    ``HEX_PART_DIGITS`` digits (the Fraction's gcd is quadratic in its size)."""
    if type(node) is int:
        return node
    if (type(node) is list and len(node) == 2 and node[0] == "x" and type(node[1]) is str
            and len(node[1]) <= HEX_PART_DIGITS and _HEX.fullmatch(node[1])):
        return int(node[1], 16)
    return None


def decode_value(text: str) -> Any:
    """One value from its wire text; :class:`WireError` if it is outside the grammar."""
    if len(text) > MAX_BYTES:
        raise WireError(f"a value over {MAX_BYTES} bytes")
    _check_nesting(text)
    try:
        tree = json.loads(text, parse_int=_parse_int, parse_constant=_refuse_constant,
                          object_pairs_hook=_refuse_object)
        _check_shape(tree)
        return _build(tree)[0]
    except WireError:
        raise
    except (ValueError, TypeError, ArithmeticError, RecursionError, MemoryError) as e:
        raise WireError(f"not wire JSON ({type(e).__name__})") from None


def decode_results(raw: bytes, n: int, max_bytes: int = MAX_BYTES) -> tuple[list[tuple[bool, Any]], str | None]:
    """Per call, ``(True, value)`` or ``(False, None)``; and why the channel is malformed, if it
    is (then every call counts as failed). A last line cut off without its newline is a call
    the run never finished reporting, not a malformation."""
    values: list[tuple[bool, Any]] = [(False, None)] * n
    try:
        _decode_lines(raw, n, min(max_bytes, MAX_BYTES), values)
    except WireError as e:
        return [(False, None)] * n, shorten(str(e))
    except Exception as e:  # noqa: BLE001 - a case the grammar missed still never reaches the trainer
        return [(False, None)] * n, f"undecodable results ({type(e).__name__})"
    return values, None


def _decode_lines(raw: bytes, n: int, cap: int, values: list) -> None:
    if len(raw) > cap:
        raise WireError(f"over {cap} bytes of results")
    if not raw.isascii():
        raise WireError("non-ASCII bytes on the results channel")
    lines = raw.decode("ascii").split("\n")
    seen = [False] * n
    for number, line in enumerate(lines[:-1], 1):  # the last piece has no newline: unfinished
        index, sep, body = line.partition("\t")
        if not sep or not index.isdigit() or len(index) > _INDEX_DIGITS or int(index) >= n:
            raise WireError(f"results line {number} has no valid call index")
        i = int(index)
        if seen[i]:
            raise WireError(f"results line {number} repeats call {i}")
        seen[i] = True
        values[i] = (False, None) if body == "!" else (True, decode_value(body))
