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
  and equality is decided on :func:`canonical` keys: sorted, never hashed.

A channel that breaks the grammar anywhere was written by the program, not by the harness,
so the whole run counts as failed and the caller is told why (``reward_errors``).

Wire grammar (``sandbox_boot._plain_repr`` writes it)::

    null | true | false | INT | FLOAT | "str"
    ["l", v...]  list            ["t", v...]  tuple
    ["s", v...]  set             ["f", v...]  frozenset
    ["d", k, v, k, v...]  dict   ["F", "inf" | "-inf" | "nan"]  non-finite float
    ["c", re, im]  complex       ["b", "hex"]  bytes
    ["q", num, den]  Fraction    ["D", "str(decimal)"]  Decimal

A line whose body is ``!`` is a call that raised or returned what has no wire form.
"""

from __future__ import annotations

import itertools
import json
import re
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
_INDEX_DIGITS = 7
_DECIMAL = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:E[-+]?\d+)?|-?(?:Infinity|s?NaN\d*)", re.ASCII)
_NUMBERS = (bool, int, float, complex, Fraction, Decimal)
_nan_ids = itertools.count()


class WireError(ValueError):
    """Results text outside the grammar or its caps, or a value with no canonical form."""


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


def _sorted_unique(keys) -> tuple:
    """Sorted keys without repeats: a set's canonical form, in n log n comparisons."""
    out: list = []
    for k in sorted(keys):
        if not out or out[-1] != k:
            out.append(k)
    return tuple(out)


def _real_key(x: Any) -> tuple:
    """A real number as Python compares it: by exact value across int, float, Fraction and
    Decimal (so Decimal('0.1') != 0.1 and Fraction(1, 2) == 0.5); NaN equals nothing."""
    if isinstance(x, Decimal):
        if x.is_nan():
            return ("~", next(_nan_ids))
        return ("n", float(x) if x.is_infinite() else Fraction(x))
    if x != x:  # a float NaN
        return ("~", next(_nan_ids))
    return ("n", int(x) if type(x) is bool else x)


def canonical(v: Any) -> tuple:
    """A totally ordered key with ``canonical(a) == canonical(b)`` exactly when Python's
    ``a == b`` (NaN anywhere makes a value equal to nothing, itself included): the trainer
    compares through it, so no set or dict of program-chosen hashes is ever built."""
    t = type(v)
    if v is None:
        return ("0",)
    if t in (bool, int, float, Fraction, Decimal):
        return _real_key(v)
    if t is complex:
        if v.imag == 0:  # 2+0j == 2
            return _real_key(v.real)
        if v != v:
            return ("~", next(_nan_ids))
        return ("c", v.real, v.imag)
    if t is str:
        return ("s", v)
    if t is bytes:
        return ("b", v)
    if t is list or t is tuple:
        return ("l" if t is list else "t", tuple(canonical(x) for x in v))
    if t in (set, frozenset, WireSet):
        return ("S", _sorted_unique(canonical(x) for x in (v.items if t is WireSet else v)))
    if t is dict or t is WireDict:
        pairs = sorted(((canonical(k), canonical(x)) for k, x in (v.items if t is WireDict else v.items())),
                       key=lambda kv: kv[0])
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
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            raise WireError(f"more than {MAX_NODES} values or {MAX_DEPTH} levels")
        if type(node) is list:
            stack.extend((x, depth + 1) for x in node)


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
    if tag == "q" and len(rest) == 2 and type(rest[0]) is int and type(rest[1]) is int and rest[1] > 0:
        return Fraction(rest[0], rest[1])
    if tag == "D" and len(rest) == 1 and type(rest[0]) is str and len(rest[0]) <= 2 * MAX_DIGITS:
        if _DECIMAL.fullmatch(rest[0]):
            d = Decimal(rest[0])
            if not d.is_finite() or abs(d.as_tuple().exponent) <= MAX_DIGITS:
                return d
    raise WireError(f"a malformed {tag!r} value")


def decode_value(text: str) -> Any:
    """One value from its wire text; :class:`WireError` if it is outside the grammar."""
    if len(text) > MAX_BYTES:
        raise WireError(f"a value over {MAX_BYTES} bytes")
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
        return [(False, None)] * n, str(e)
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
