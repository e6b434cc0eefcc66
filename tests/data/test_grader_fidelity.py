"""Right answers score 1 and near misses score 0, exactly as plain Python's ``assert`` decides.

Each case is an assert, an idiomatic correct function and a near-miss wrong one. All correct
functions form one program and all wrong ones another, so one sandbox run per program and
layer grades every case (the calls are batched). The reference is plain Python: the same
program exec'd here (it is the test's own code) and the assert run on it. The wrappers
(``list``, ``sorted``, ``len``...) reach generators, ``map`` and views because they are
applied inside the sandbox; Counter, namedtuple, Fraction, Decimal, enums, bytes, complex and
the infinities compare as Python compares them.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from decimal import Decimal, localcontext

import pytest

from scalerl.data.asserts import parse_assert
from scalerl.data.sandbox import SandboxLimits
from scalerl.data.sandbox.ns import isolation
from scalerl.data.tasks.code import _same_output, run_tests

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial

NS = pytest.mark.skipif(not isolation().namespaces, reason=f"no kernel namespaces: {isolation().missing}")
LAYERS = pytest.mark.parametrize("namespaces", [pytest.param(True, marks=NS, id="namespaces"),
                                                pytest.param(False, id="python-fallback")])
LIMITS = SandboxLimits(timeout_s=20.0)

PRELUDE = """
import cmath, collections, dataclasses, enum, functools, math, sys, threading, typing, unicodedata
from decimal import Decimal
from fractions import Fraction
P = collections.namedtuple('P', 'x y')
class Colour(enum.IntEnum):
    RED = 1
class PlainColour(enum.Enum):
    RED = 1
class Name(enum.StrEnum):
    RED = 'red'
class Perm(enum.IntFlag):
    R = 1
    W = 2
@dataclasses.dataclass
class Pt:
    x: int
    y: int
class TD(typing.TypedDict):
    a: int
"""
ASYNC_TWICE = "def twice_async(x):\n    import asyncio\n    async def t(y):\n        await asyncio.sleep(0)\n        return 2 * y\n"

# (assert, correct body, near-miss body): each body is the function's, named in the assert
CASES = [
    ("assert list(gen(3)) == [0, 1, 2]", "def gen(n):\n    yield from range(n)", "def gen(n):\n    yield from range(1, n + 1)"),
    ("assert sorted(keys({'b': 1, 'a': 2})) == ['a', 'b']", "def keys(d):\n    return d.keys()", "def keys(d):\n    return d.values()"),
    ("assert list(double([1, 2])) == [2, 4]", "def double(xs):\n    return map(lambda x: 2 * x, xs)", "def double(xs):\n    return map(lambda x: x + 2, xs)"),
    ("assert len(upto(5)) == 5", "def upto(n):\n    return range(n)", "def upto(n):\n    return range(n + 1)"),
    ("assert counts('aab') == {'a': 2, 'b': 1}", "def counts(s):\n    return collections.Counter(s)", "def counts(s):\n    return collections.Counter(set(s))"),
    ("assert tally('aab') == {'a': 2, 'b': 1}",
     "def tally(s):\n    d = collections.defaultdict(int)\n    for c in s:\n        d[c] += 1\n    return d",
     "def tally(s):\n    d = collections.defaultdict(int)\n    for c in s:\n        d[c] = 1\n    return d"),
    ("assert point() == (1, 2)", "def point():\n    return P(1, 2)", "def point():\n    return P(2, 1)"),
    ("assert half() == 0.5", "def half():\n    return Fraction(1, 2)", "def half():\n    return Fraction(1, 3)"),
    ("assert colour() == 1", "def colour():\n    return Colour.RED", "def colour():\n    return PlainColour.RED"),
    ("assert rev(b'ab') == b'ba'", "def rev(b):\n    return b[::-1]", "def rev(b):\n    return b[::-1].decode()"),
    ("assert top() == 1e999", "def top():\n    return float('inf')", "def top():\n    return 1e308"),
    ("assert bottom() == float('-inf')", "def bottom():\n    return -math.inf", "def bottom():\n    return -1e308"),
    ("assert root() == 1j", "def root():\n    return cmath.sqrt(-1)", "def root():\n    return -cmath.sqrt(-1)"),
    ("assert ordered() == {'a': 1, 'b': 2}", "def ordered():\n    return collections.OrderedDict(b=2, a=1)", "def ordered():\n    return collections.OrderedDict(a=1, b=3)"),
    ("assert list(lru()) == ['b', 'a']",
     "def lru():\n    d = collections.OrderedDict(a=1, b=2)\n    d.move_to_end('a')\n    return d",
     "def lru():\n    return {'a': 1, 'b': 2}"),
    ("assert tenth() == 0.1", "def tenth():\n    return 1 / 10", "def tenth():\n    return Decimal('0.1')"),
    ("assert money() == 0.5", "def money():\n    return Decimal('0.50')", "def money():\n    return Decimal('0.499')"),
    ("assert uniq([3, 1, 3]) == {1, 3}", "def uniq(xs):\n    return set(xs)", "def uniq(xs):\n    return set(xs) | {0}"),
    ("assert frozen() == {1, 2}", "def frozen():\n    return frozenset({2, 1})", "def frozen():\n    return frozenset({1})"),
    ("assert set(evens(6)) == {0, 2, 4}", "def evens(n):\n    return (i for i in range(0, n, 2))", "def evens(n):\n    return (i for i in range(0, n, 3))"),
    ("assert tuple(pairs()) == ((1, 'a'), (2, 'b'))", "def pairs():\n    return zip([1, 2], 'ab')", "def pairs():\n    return zip([1, 2], 'ba')"),
    ("assert dict(table()) == {1: 'a', 2: 'b'}", "def table():\n    return zip([1, 2], 'ab')", "def table():\n    return zip('ab', [1, 2])"),
    ("assert sum(squares(3)) == 5", "def squares(n):\n    return (x * x for x in range(n))", "def squares(n):\n    return (x * x for x in range(n + 1))"),
    ("assert max(vals()) == 9", "def vals():\n    return iter([3, 9, 2])", "def vals():\n    return iter([3, 8, 2])"),
    ("assert min(lows()) == -1", "def lows():\n    return {4: 0, -1: 0}.keys()", "def lows():\n    return {4: 0, -1: 0}.values()"),
    ("assert str(third()) == '1/3'", "def third():\n    return Fraction(2, 6)", "def third():\n    return 1 / 3"),
    ("assert int(answer()) == 42", "def answer():\n    return '42'", "def answer():\n    return '41'"),
    ("assert float(two_and_half()) == 2.5", "def two_and_half():\n    return Fraction(5, 2)", "def two_and_half():\n    return Decimal('2.4')"),
    ("assert is_even(4)", "def is_even(n):\n    return n % 2 == 0", "def is_even(n):\n    return n % 2"),
    ("assert not is_odd(4)", "def is_odd(n):\n    return n % 2 == 1", "def is_odd(n):\n    return [n % 2]"),
    ("assert not empty_counter()", "def empty_counter():\n    return collections.Counter()", "def empty_counter():\n    return collections.Counter(a=0)"),
    ("assert find(3) is None", "def find(x):\n    return None", "def find(x):\n    return 0"),
    ("assert flag() is True", "def flag():\n    return 1 < 2", "def flag():\n    return 1"),
    ("assert math.isclose(area(1), 3.14159, rel_tol=1e-5)", "def area(r):\n    return math.pi * r * r", "def area(r):\n    return 3.14 * r * r"),
    ("assert abs(sqrt2() - 1.41421) < 1e-4", "def sqrt2():\n    return math.sqrt(2)", "def sqrt2():\n    return 1.414"),
    ("assert abs(quarter_turn() - 1j) < 1e-9", "def quarter_turn():\n    return cmath.exp(1j * math.pi / 2)", "def quarter_turn():\n    return cmath.exp(-1j * math.pi / 2)"),
    ("assert abs(half_again() - 0.5) <= 0", "def half_again():\n    return Fraction(1, 2)", "def half_again():\n    return Decimal('0.5')"),
    ("assert nested() == {'a': [1, {'b': (2, 3)}]}", "def nested():\n    return {'a': [1, {'b': (2, 3)}]}", "def nested():\n    return {'a': [1, {'b': [2, 3]}]}"),
    ("assert zeros(2) == [[0, 0], [0, 0]]", "def zeros(n):\n    return [[0] * n for _ in range(n)]", "def zeros(n):\n    return [[0] * n]"),
    ("assert words('a b  c') == ['a', 'b', 'c']", "def words(s):\n    return s.split()", "def words(s):\n    return s.split(' ')"),
    ("assert accent() == 'h\\u00e9llo \\u2713'", "def accent():\n    return unicodedata.normalize('NFC', 'he\\u0301llo \\u2713')",
     "def accent():\n    return 'he\\u0301llo \\u2713'"),
    ("assert big() == 1267650600228229401496703205376", "def big():\n    return 1 << 100", "def big():\n    return (1 << 100) + 1"),
    ("assert neg_zero() == 0", "def neg_zero():\n    return -0.0", "def neg_zero():\n    return 1e-300"),
    ("assert as_list() == [1, 2, 3]", "def as_list():\n    return list(collections.deque([1, 2, 3]))", "def as_list():\n    return collections.deque([1, 2, 3])"),
    ("assert list(queue()) == [1, 2, 3]", "def queue():\n    return collections.deque([1, 2, 3])", "def queue():\n    return collections.deque([3, 2, 1])"),
    ("assert sorted(bag()) == [1, 2, 3]", "def bag():\n    return {3, 1, 2}", "def bag():\n    return {3, 1}"),
    ("assert len(letters()) == 3", "def letters():\n    return 'abc'", "def letters():\n    return 'abcd'"),
    ("assert deep() == (1, (2, [3]))", "def deep():\n    return (1, (2, [3]))", "def deep():\n    return (1, (2, (3,)))"),
    ("assert name() == 'red'", "def name():\n    return Name.RED", "def name():\n    return Name.RED.name"),
    ("assert perm() == 3", "def perm():\n    return Perm.R | Perm.W", "def perm():\n    return Perm.R"),
    ("assert buf() == b'xy'", "def buf():\n    return bytearray(b'xy')", "def buf():\n    return bytearray(b'yx')"),
    ("assert astuple() == (1, 2)", "def astuple():\n    return dataclasses.astuple(Pt(1, 2))", "def astuple():\n    return Pt(1, 2)"),
    ("assert add(1, b=2) == 3", "def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"),
    ("assert Solver.solve(2) == 4",
     "class Solver:\n    @staticmethod\n    def solve(n):\n        return n * 2",
     "class Solver:\n    @staticmethod\n    def solve(n):\n        return n + 3"),
    ("assert sets_in_dict() == {1: {2: {3}}}", "def sets_in_dict():\n    return {1: {2: frozenset({3})}}", "def sets_in_dict():\n    return {1: {2: {3, 4}}}"),
    ("assert zero() == 0", "def zero():\n    return Fraction(0)", "def zero():\n    return Decimal('1E-30')"),
    ("assert anything_but_nan() != 1.0", "def anything_but_nan():\n    return float('nan')", "def anything_but_nan():\n    return 1"),
    ("assert inf_list() == [float('inf'), 1]", "def inf_list():\n    return [Decimal('Infinity'), True]", "def inf_list():\n    return [float('nan'), 1]"),
    ("assert complex_real() == 2", "def complex_real():\n    return complex(2, 0)", "def complex_real():\n    return complex(2, 1e-300)"),
    ("assert dict_of_counts() == {('a', 1): 2}", "def dict_of_counts():\n    return collections.Counter([('a', 1), ('a', 1)])",
     "def dict_of_counts():\n    return collections.Counter([('a', 1), ['a', 1]][:1])"),
    # issue 28: idioms that scored below 1 in the reliability probe (C17, C21), and more
    ("assert twice_async(21) == 42", ASYNC_TWICE + "    return asyncio.run(t(x))", ASYNC_TWICE + "    return asyncio.run(t(x - 1))"),
    (f"assert big16000() == {hex(1 << 16000)}", "def big16000():\n    return 1 << 16000",
     "def big16000():\n    return (1 << 16000) + 1"),
    (f"assert bits({hex(1 << 16000)}) == 16001", "def bits(n):\n    return n.bit_length()", "def bits(n):\n    return len(bin(n))"),
    ("assert fib_cached(200) == 280571172992510140037611932413038677189525",
     "@functools.cache\ndef fib_cached(n):\n    return n if n < 2 else fib_cached(n - 1) + fib_cached(n - 2)",
     "@functools.cache\ndef fib_cached(n):\n    return 1 if n < 2 else fib_cached(n - 1) + fib_cached(n - 2)"),
    ("assert depth(30000) == 30000",
     "def depth(n):\n    sys.setrecursionlimit(100000)\n    def d(k):\n        return 0 if k == 0 else 1 + d(k - 1)\n    return d(n)",
     "def depth(n):\n    sys.setrecursionlimit(100000)\n    def d(k):\n        return 1 if k == 0 else 1 + d(k - 1)\n    return d(n)"),
    ("assert str(three_tenths()) == '0.3'", "def three_tenths():\n    return Decimal('0.1') * 3", "def three_tenths():\n    return 0.1 * 3"),
    ("assert harmonic(2) == 1.5", "def harmonic(n):\n    return sum(Fraction(1, k) for k in range(1, n + 1))",
     "def harmonic(n):\n    return sum(Fraction(1, k) for k in range(1, n + 2))"),
    ("assert typed_dict() == {'a': 1}", "def typed_dict():\n    return TD(a=1)", "def typed_dict():\n    return TD(a=2)"),
    ("assert threaded_sum(100) == 4950",
     "def threaded_sum(n):\n    out = []\n    t = threading.Thread(target=lambda: out.append(sum(range(n))))\n    t.start()\n    t.join()\n    return out[0]",
     "def threaded_sum(n):\n    out = []\n    t = threading.Thread(target=lambda: out.append(sum(range(1, n + 1))))\n    t.start()\n    t.join()\n    return out[0]"),
    ("assert exact_power() == 0.0009765625", "def exact_power():\n    return Decimal(2) ** -10", "def exact_power():\n    return Decimal('0.0009766')"),
]


def _program(bodies: list[str]) -> str:
    return PRELUDE + "\n" + "\n\n".join(bodies) + "\n"


GOOD = _program([good for _, good, _ in CASES])
BAD = _program([bad for _, _, bad in CASES])


def _python_verdicts(program: str) -> list[bool]:
    """What plain Python's ``assert`` says of each case (the program is this test's own)."""
    space: dict = {"__name__": "fidelity"}
    limit = sys.getrecursionlimit()  # the depth case sets it to 100000 here, in the test's process
    try:
        exec(compile(program, "fidelity.py", "exec", dont_inherit=True), space)
        verdicts = []
        for snippet, _, _ in CASES:
            try:
                exec(snippet, space)
                verdicts.append(True)
            except Exception:  # noqa: BLE001 - AssertionError, or a TypeError as Python raises it
                verdicts.append(False)
    finally:  # every later test (the results decoder's among them) runs under the usual limit
        sys.setrecursionlimit(limit)
    return verdicts


def test_the_cases_are_what_they_claim_in_plain_python():
    assert len(CASES) >= 40 and len({parse_assert(s).func for s, _, _ in CASES}) == len(CASES)
    limit = sys.getrecursionlimit()
    assert _python_verdicts(GOOD) == [True] * len(CASES)
    assert _python_verdicts(BAD) == [False] * len(CASES)
    assert sys.getrecursionlimit() == limit  # the depth case raised it in this process: given back


@LAYERS
@pytest.mark.parametrize("which", ["correct", "near-miss"])
def test_the_grader_agrees_with_python_on_every_case(namespaces, which):
    program = GOOD if which == "correct" else BAD
    tests = {"kind": "calls", "cases": [parse_assert(s) for s, _, _ in CASES]}
    got = run_tests(program, tests, dataclasses.replace(LIMITS, namespaces=namespaces))
    want = _python_verdicts(program)
    disagree = [(CASES[i][0], want[i]) for i in range(len(CASES)) if got[i] != want[i]]
    assert not disagree


FORGERIES = textwrap.dedent("""
    import builtins, enum
    class LyingInt(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__
    class LyingStr(str):
        def __eq__(self, other):
            return True
        def __repr__(self):
            return "'secret'"
    class LyingList(list):
        def __eq__(self, other):
            return True
    class LyingEnum(enum.IntEnum):
        A = 0
        def __eq__(self, other):
            return True
    class Anything:
        def __eq__(self, other):
            return True
        __hash__ = object.__hash__
    real_sorted = sorted
    builtins.list = lambda *a: [7, 7]
    builtins.sorted = lambda *a, **k: [7, 7]
    builtins.len = lambda *a: 7
    def a():
        return LyingInt(0)
    def b():
        return LyingStr('x')
    def c():
        return LyingList()
    def d():
        return LyingEnum.A
    def e():
        return {Anything()}
    def f():
        return []
""")
FORGED_TESTS = ["assert a() == 7", "assert b() == 'secret'", "assert c() == [7, 7]", "assert d() == 7",
                "assert e() == {7}", "assert list(f()) == [7, 7]", "assert sorted(f()) == [7, 7]",
                "assert len(f()) == 7"]


@LAYERS
def test_lying_subclasses_and_patched_wrappers_cannot_forge_a_pass(namespaces):
    # a subclass crosses as the built-in value it holds, and wrappers are the harness's own
    tests = {"kind": "calls", "cases": [parse_assert(s) for s in FORGED_TESTS]}
    got = run_tests(FORGERIES, tests, dataclasses.replace(LIMITS, namespaces=namespaces))
    assert got == [False] * len(FORGED_TESTS)


def _digits_of_two_to(n: int) -> str:
    """``str(2 ** n)`` without this process's 4300-digit cap on int -> str."""
    with localcontext() as ctx:
        ctx.prec = n  # more digits than 2 ** n has: the power is exact
        return str(Decimal(2) ** n)


# stdin/stdout programs: name -> (correct program, near miss, [(stdin, expected stdout)]).
# The first six scored below 1 in the reliability probe (C17, C23-C27); the rest are idioms
# of competitive programs. Each program is a whole file, as a judge runs it.
IO_CASES = {
    "exit_on_an_early_out": (  # C23: python -S defines no exit()
        "n = int(input())\nif n == 0:\n    print('zero')\n    exit()\nprint(n * 2)",
        "n = int(input())\nif n == 0:\n    print('zero')\n    exit(1)\nprint(n * 2)",
        [("0\n", "zero\n"), ("21\n", "42\n")]),
    "quit_at_the_end": (  # C24
        "print(sum(map(int, input().split())))\nquit()",
        "print(sum(map(int, input().split())))\nquit(2)",
        [("1 2\n", "3\n")]),
    "thread_with_a_big_stack": (  # C25: the harness used to exit before the thread ran
        "import sys, threading\nsys.setrecursionlimit(1 << 20)\nthreading.stack_size(1 << 26)\n"
        "def main():\n    n = int(sys.stdin.readline())\n    def d(k):\n        return 0 if k == 0 else 1 + d(k - 1)\n"
        "    print(d(n))\nthreading.Thread(target=main).start()",
        "import sys, threading\nsys.setrecursionlimit(1 << 20)\nthreading.stack_size(1 << 26)\n"
        "def main():\n    n = int(sys.stdin.readline())\n    def d(k):\n        return 1 if k == 0 else 1 + d(k - 1)\n"
        "    print(d(n))\nthreading.Thread(target=main).start()",
        [("20000\n", "20000\n"), ("3\n", "3\n")]),
    "output_buffered_until_atexit": (  # C26
        "import atexit, io, sys\nreal, sys.stdout = sys.stdout, io.StringIO()\n"
        "atexit.register(lambda: real.write(sys.stdout.getvalue()))\nprint(int(input()) * 2)",
        "import atexit, io, sys\nreal, sys.stdout = sys.stdout, io.StringIO()\n"
        "atexit.register(lambda: real.write(sys.stdout.getvalue()))\nprint(int(input()) * 2 + 1)",
        [("21\n", "42\n")]),
    "read_dev_stdin": (  # C27
        "data = open('/dev/stdin').read().split()\nprint(sum(map(int, data)))",
        "data = open('/dev/stdin').read().split()\nprint(sum(map(int, data[1:])))",
        [("1 2\n3\n", "6\n")]),
    "asyncio_run": (  # C17
        "import asyncio\nasync def twice(x):\n    await asyncio.sleep(0)\n    return 2 * x\n"
        "print(asyncio.run(twice(int(input()))))",
        "import asyncio\nasync def twice(x):\n    await asyncio.sleep(0)\n    return 2 * x\n"
        "print(asyncio.run(twice(int(input()) - 1)))",
        [("21\n", "42\n")]),
    "input_until_eof": (
        "total = 0\nwhile True:\n    try:\n        total += int(input())\n    except EOFError:\n        break\nprint(total)",
        "total = 0\nwhile True:\n    try:\n        total = int(input())\n    except EOFError:\n        break\nprint(total)",
        [("1\n2\n3", "6\n")]),
    "flush_and_write_without_newline": (
        "import sys\nn = int(input())\nprint(n, end=' ', flush=True)\nsys.stdout.write(str(n * n))",
        "import sys\nn = int(input())\nprint(n, end=' ', flush=True)\nsys.stdout.write(str(n * n) + ' 0')",
        [("21\n", "21 441")]),
    "deep_recursion_on_the_main_thread": (
        "import sys\nsys.setrecursionlimit(100000)\ndef f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(int(input())))",
        "import sys\nsys.setrecursionlimit(100000)\ndef f(n):\n    return 0 if n <= 1 else 1 + f(n - 1)\nprint(f(int(input())))",
        [("30000\n", "30000\n")]),
    "future_annotations_typing_dataclass": (
        "from __future__ import annotations\nfrom dataclasses import dataclass, field\nfrom typing import Optional\n"
        "@dataclass(order=True)\nclass Item:\n    w: int\n    name: str = field(compare=False)\n"
        "    nxt: Optional[Item] = field(default=None, compare=False)\n"
        "items = sorted(Item(int(w), n) for n, w in (line.split() for line in open(0)))\n"
        "print(' '.join(i.name for i in items))",
        "from __future__ import annotations\nfrom dataclasses import dataclass, field\nfrom typing import Optional\n"
        "@dataclass(order=True)\nclass Item:\n    w: int\n    name: str = field(compare=False)\n"
        "    nxt: Optional[Item] = field(default=None, compare=False)\n"
        "items = sorted((Item(int(w), n) for n, w in (line.split() for line in open(0))), reverse=True)\n"
        "print(' '.join(i.name for i in items))",
        [("b 2\na 1\nc 3\n", "a b c\n")]),
    "fraction_result": (
        "from fractions import Fraction\nprint(sum(Fraction(1, k) for k in range(1, int(input()) + 1)))",
        "from fractions import Fraction\nprint(sum(Fraction(1, k) for k in range(1, int(input()))))",
        [("4\n", "25/12\n")]),
    "decimal_result": (
        "from decimal import Decimal, getcontext\ngetcontext().prec = 50\nprint(Decimal(1) / Decimal(int(input())))",
        "from decimal import Decimal\nprint(Decimal(1) / Decimal(int(input())))",
        [("7\n", "0.14285714285714285714285714285714285714285714285714\n")]),
    "functools_cache_and_stdin_buffer": (
        "import functools, sys\n@functools.cache\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "print(*(fib(int(x)) for x in sys.stdin.buffer.read().split()))",
        "import functools, sys\n@functools.cache\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 1)\n"
        "print(*(fib(int(x)) for x in sys.stdin.buffer.read().split()))",
        [("10 90\n", "55 2880067194370816120\n")]),
    "int_of_more_than_4300_digits_printed": (
        "import sys\nsys.set_int_max_str_digits(0)\nprint(2 ** int(input()))",
        "import sys\nsys.set_int_max_str_digits(0)\nprint(2 ** int(input()) - 1)",
        [("20000\n", _digits_of_two_to(20000) + "\n")]),
}


def _python_io_verdicts(program: str, cases: list[tuple[str, str]], tmp_path) -> list[bool]:
    """What plain Python (``python file.py``, the interpreter the sandbox runs) gives each case."""
    path = tmp_path / "solution.py"
    path.write_text(program)
    verdicts = []
    for stdin, want in cases:
        r = subprocess.run([sys.executable, "-I", str(path)], input=stdin, capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
        verdicts.append(r.returncode == 0 and _same_output(r.stdout, want))
    return verdicts


@pytest.mark.parametrize("name", sorted(IO_CASES))
def test_io_cases_are_what_they_claim_in_plain_python(name, tmp_path):
    good, bad, cases = IO_CASES[name]
    assert _python_io_verdicts(good, cases, tmp_path) == [True] * len(cases)
    assert not all(_python_io_verdicts(bad, cases, tmp_path))


@LAYERS
@pytest.mark.parametrize("name", sorted(IO_CASES))
def test_io_programs_score_as_plain_python_does(name, namespaces, tmp_path):
    # right answers pass every case; a near miss fails the cases plain Python fails, and no
    # other: every program here ends (threads joined, atexit run) well inside the budget,
    # so no race decides a verdict
    good, bad, cases = IO_CASES[name]
    tests = {"kind": "io", "cases": cases}
    limits = dataclasses.replace(LIMITS, namespaces=namespaces)
    assert run_tests(good, tests, limits) == [True] * len(cases)
    assert run_tests(bad, tests, limits) == _python_io_verdicts(bad, cases, tmp_path)
