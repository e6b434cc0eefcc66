"""The sandbox runs ordinary programs, returns plain-data call results and enforces limits.
Attacks on the reward and on isolation are in ``test_sandbox_escapes.py``."""

import dataclasses
import os
import tempfile
import time
from fractions import Fraction

import pytest

from scalerl.data.sandbox import SandboxLimits, run_cases, run_python
from scalerl.data.sandbox.ns import isolation

FAST = SandboxLimits(timeout_s=2.0)
NS = pytest.mark.skipif(not isolation().namespaces, reason=f"no kernel namespaces: {isolation().missing}")

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial


def test_ordinary_program_reads_stdin_and_writes_stdout():
    r = run_python("import collections\nn = int(input())\nprint(n * 2)", stdin="21\n")
    assert r.finished and r.stdout == "42\n"


def test_calls_return_plain_data_and_anything_else_fails():
    src = ("import collections\ndef f(x):\n    return {'k': (x, [x + 0.5, None], {1, 2})}\n"
           "def g():\n    return collections.OrderedDict()\ndef h():\n    raise ValueError('no')\n"
           "def big():\n    return 10 ** 5000\ndef nan():\n    return float('nan')")
    r = run_python(src, calls=[["f", "(1,)", "{}"], ["g", "()", "{}"], ["h", "()", "{}"],
                               ["missing", "()", "{}"], ["big", "()", "{}"], ["nan", "()", "{}"],
                               ["f", "()", "{'x': -2}"]])
    assert r.values[0] == (True, {"k": (1, [1.5, None], {1, 2})})
    assert r.values[1] == (True, {})  # an OrderedDict goes as the dict it holds
    assert r.values[2:4] == [(False, None)] * 2  # raise, missing
    assert r.values[4][0] and r.values[4][1] == 10 ** 5000  # > 4300 digits: crosses in hex
    assert r.values[5][0] and r.values[5][1] != r.values[5][1]  # nan crosses, and equals nothing
    assert r.values[6] == (True, {"k": (-2, [-1.5, None], {1, 2})}) and r.error is None


def test_frozensets_anywhere_come_back_as_sets():
    src = ("def f():\n    return [frozenset({1, 2}), {'k': frozenset()}, frozenset({3})]\n"
           "def g():\n    return frozenset({1})\n")
    r = run_python(src, calls=[["f", "()", "{}"], ["g", "()", "{}"]])
    assert r.values[0] == (True, [{1, 2}, {"k": set()}, {3}]) and r.values[1] == (True, {1})


def test_a_program_that_raises_reports_no_values():
    r = run_python("def f():\n    return 1\nraise RuntimeError('boom')", calls=[["f", "()", "{}"]])
    assert not r.finished and r.exit_code == 1 and r.values == [(False, None)] and "boom" in r.stderr


def test_infinite_loop_is_stopped_at_the_budget():
    r = run_python("while True:\n    pass", limits=FAST)
    assert r.timed_out and not r.finished and r.exit_code is None


def test_sleeping_program_is_killed_too():
    t0 = time.monotonic()
    r = run_python("import time\ntime.sleep(60)", limits=SandboxLimits(timeout_s=1.0))
    assert r.timed_out and time.monotonic() - t0 < 50  # killed, not waited for


def test_cases_share_one_budget_and_stop_at_the_first_timeout():
    src = "import time\nn = int(input())\nif n == 1:\n    time.sleep(60)\nprint(n)"
    t0 = time.monotonic()
    rs = run_cases(src, ["0", "1", "2", "3"], SandboxLimits(timeout_s=1.0, parallel=1))
    assert rs[0].finished and rs[0].stdout == "0\n"
    assert rs[1].timed_out and rs[2] is None and rs[3] is None  # never started
    assert time.monotonic() - t0 < 50


def test_cases_run_in_parallel():
    rs = run_cases("print(int(input()) * 3)", [str(i) for i in range(6)], SandboxLimits(parallel=3))
    assert [r.stdout for r in rs] == [f"{3 * i}\n" for i in range(6)]


def test_memory_bomb_is_refused():
    r = run_python("x = bytearray(4 * 10**9)\nprint('allocated')", limits=FAST)
    assert "allocated" not in r.stdout and not r.finished
    r = run_python("x = []\nwhile True:\n    x.append(bytearray(10**7))", limits=FAST)
    assert not r.finished


@pytest.mark.parametrize("bomb", [
    "import os\nwhile True:\n    os.fork()",
    "import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])",
    "import os\nos.system('sleep 30 &')",
    "import multiprocessing\nmultiprocessing.Process(target=print).start()",
    # asyncio imports now (issue 28): its subprocess routes, and the module subprocess loads
    "import asyncio\nasyncio.run(asyncio.create_subprocess_exec('sh', '-c', 'sleep 30'))",
    "import asyncio\nasyncio.run(asyncio.create_subprocess_shell('sleep 30'))",
    "import _posixsubprocess\n_posixsubprocess.fork_exec(*[None] * 23)",
])
def test_process_creation_is_blocked(bomb):
    r = run_python(bomb, limits=FAST)
    assert not r.finished and not r.timed_out and "PermissionError" in r.stderr


@pytest.mark.parametrize("attempt", [
    # fcntl imports (subprocess, so asyncio, needs it) but does nothing: F_SETOWN would aim
    # SIGIO at any process of the program's uid
    "import fcntl, os\nr, w = os.pipe()\nfcntl.fcntl(r, fcntl.F_SETOWN, os.getppid())",
    "import fcntl, os\nfcntl.flock(os.open('.', os.O_RDONLY), fcntl.LOCK_EX)",
    "import fcntl\nfcntl.ioctl(0, 0x5412, b'x')",  # TIOCSTI
    # AF_UNIX sockets are allowed for asyncio's self-pipe, and reach nothing else
    "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/tmp/.X11-unix/X0')",
    "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\ns.sendto(b'x', '\\0abstract')",
    "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0listen')",
])
def test_what_asyncio_needs_opens_nothing_else(attempt):
    r = run_python(attempt, limits=FAST)
    assert not r.finished and not r.timed_out and "PermissionError" in r.stderr, r.stderr


def test_a_fraction_too_big_to_compare_cheaply_fails_its_call_only():
    r = run_python("from fractions import Fraction\ndef f():\n    return Fraction(1 << 20000, 3)\n"
                   "def g():\n    return Fraction(1 << 10000, 3)", calls=[["f", "()", "{}"], ["g", "()", "{}"]])
    assert r.error is None and r.values == [(False, None), (True, Fraction(1 << 10000, 3))]


def test_reads_outside_the_sandbox_are_blocked():
    for src in ("print(open('/etc/passwd').read())",
                "print(open('../../../../etc/passwd').read())",
                "import os\nprint(os.listdir('/'))",
                "import pathlib\nprint(pathlib.Path('/etc/hostname').read_text())"):
        r = run_python(src, limits=FAST)
        assert not r.finished and "root:" not in r.stdout and "PermissionError" in r.stderr


def test_writes_stay_inside_the_sandbox_directory(tmp_path):
    r = run_python("open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read())")
    assert r.finished and r.stdout == "ok\n"
    target = tmp_path / "escaped.txt"
    r = run_python(f"open({str(target)!r}, 'w').write('x')", limits=FAST)
    assert not r.finished and not target.exists()


def test_network_is_blocked():
    src = "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 22))"
    r = run_python(src, limits=FAST)
    assert not r.finished and "PermissionError" in r.stderr


def test_program_cannot_disable_the_audit_hook():
    src = ("import sys\nhook = sys._getframe(1).f_locals['hook']\n"
           "hook.__defaults__ = (None,)\nprint(open('/etc/passwd').read())")
    r = run_python(src, limits=FAST)
    assert not r.finished and "root:" not in r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="privilege drop needs root")
def test_runs_as_an_unprivileged_uid_when_trainer_is_root():
    # a leased uid of its own (sandbox_uids), or nobody where the pool cannot be used
    from scalerl.data.sandbox.uids import LEASED

    r = run_python("import os\nprint(os.getuid(), os.getgid())")
    uid, gid = map(int, r.stdout.split())
    assert uid == gid and (uid in LEASED or uid == 65534)


def test_output_flood_is_capped():
    r = run_python("print('x' * 10**8)", limits=SandboxLimits(max_output_bytes=1 << 16))
    assert len(r.stdout) <= 1 << 16 and not r.finished


@NS
def test_kernel_layer_alone_contains_a_program_past_the_audit_hook(tmp_path):
    # without the audit hook, the namespaces still hide the host's files and network
    (tmp_path / "host.txt").write_text("host secret")
    src = (f"import os, socket\nprint(os.path.exists({str(tmp_path / 'host.txt')!r}), os.path.exists('/proc/1'),"
           " os.path.exists('/etc/passwd'), os.getpid())\n"
           "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\nexcept OSError as e:\n"
           "    print('net', e.errno)\n")
    r = run_python(src, limits=SandboxLimits(audit_hook=False))
    assert r.finished, r.stderr
    flags, net = r.stdout.splitlines()
    assert flags == "False False False 1" and net.startswith("net")


def test_isolation_is_described_in_one_line():
    line = isolation().describe()
    assert "\n" not in line and ("kernel namespaces" in line if isolation().namespaces else "WARNING" in line)


def test_a_launch_that_fails_leaks_no_descriptors_or_folders(monkeypatch, tmp_path):
    import scalerl.data.sandbox as sandbox

    def refuse(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(sandbox.subprocess, "Popen", refuse)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the work folders go
    before = set(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(OSError, match="Too many open files"):
            run_python("print(1)", limits=SandboxLimits(namespaces=False))
    assert set(os.listdir("/proc/self/fd")) == before and not list(tmp_path.iterdir())


@NS
def test_a_chain_whose_trainer_is_gone_before_the_death_signal_stops_itself():
    # the chain checks, once its death signal is armed, that its parent is still the trainer
    # that started it: here it is told to expect another pid, as if that trainer had died
    import subprocess

    from scalerl.data.sandbox.ns import ns_argv, python_path

    def run(parent):
        argv = ns_argv(user_namespace=isolation().user_namespace, disk_mb=1, parent=parent,
                       inner=[python_path(), "-I", "-S", "-c", "print('ran')"])
        return subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                              env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})

    gone = run(parent=os.getpid() + 1_000_000)
    assert gone.returncode == 125 and gone.stdout == b""
    here = run(parent=None)
    assert here.returncode == 0 and here.stdout.strip() == b"ran"


HONEST = '''
import inspect, sys, traceback
from dataclasses import dataclass

@dataclass
class Pair:
    a: int
    b: int = 0

for _ in range(100):  # appends to one file are not new files
    with open("log.txt", "a") as f:
        f.write("x")
def gen():
    yield 1
assert inspect.signature(Pair).parameters["b"].default == 0 and next(gen()) == 1
try:
    1 / 0
except ZeroDivisionError:
    assert "ZeroDivisionError" in traceback.format_exc()
read = sys.stdin.buffer.readline if sys.argv[-1] != "open0" else open(0).readline
a, b = map(int, read().split())
print(Pair(a, b).a + Pair(a, b).b)
'''


@pytest.mark.parametrize("namespaces", [pytest.param(True, marks=NS), False])
def test_honest_programs_use_the_ordinary_idioms(namespaces):
    # dataclasses, inspect and traceback read code objects and frames; competitive programs
    # read sys.stdin.buffer or open(0): none of it may cost a correct program its reward
    limits = dataclasses.replace(SandboxLimits(), namespaces=namespaces)
    for source in (HONEST, HONEST.replace('sys.argv[-1] != "open0"', "False")):
        (result,) = run_cases(source, ["3 4\n"], limits)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.strip() == "7"
