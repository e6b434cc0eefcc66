"""Adversarial tests of the code reward: every attack scores 0 and leaves no process behind.

The attacks are the ones found against earlier versions of the sandbox (rebinding ``exec``,
reading the harness's secret through frames, a permissive ``__eq__``, a native double fork,
filling the disk) and the standard Python-jail and reward-hacking repertoire: frame and
``gc`` walking, ``sys.modules`` and harness tampering, ``atexit``/``__del__``/thread tricks,
signal handlers, ``ctypes``, ``/proc``, symlinks and traversal to the answers, environment
leaks, huge or deep or non-plain return values.

Three families, each run on the full stack, the Python layers alone (the fallback without
namespaces) and the kernel layer alone:
- GENERIC: would pass tests *without knowing their answers* if the verdict could be forged;
- SECRET: the expected answer exists only on the host (a file, an environment variable, the
  trainer's memory); a route that reaches it would score 1;
- single attacks whose success would turn into a reward: a native extension the program
  writes, filling the disk, overwriting the trainer's own modules, reaching a live listener
  on the host, a double-forked setsid child.
What the Python layer must refuse because no audit event reports it (``mkfifo``, a fresh
builtin module, crafted bytecode, directory fds) is in ``test_sandbox_boot.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from scalerl.data.sandbox import SandboxLimits, run_python
from scalerl.data.sandbox.fallback import disk_caps
from scalerl.data.sandbox.ns import isolation, work_inodes
from scalerl.data.tasks.base import Example
from scalerl.data.tasks.code import code_reward, normalize_tests

LIMITS = SandboxLimits(timeout_s=3.0)
NO_HOOK = SandboxLimits(timeout_s=3.0, audit_hook=False)
NS = pytest.mark.skipif(not isolation().namespaces, reason=f"no kernel namespaces: {isolation().missing}")
ADD_TESTS = ["assert add(123456, 654321) == 777777", "assert add(-5, 2) == -3"]

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial


def _sandbox_pids(program_only: bool = False) -> set[int]:
    """Live processes that carry the sandbox's environment marker or another PID namespace
    (``program_only``: only the latter, i.e. the program itself behind its launch chain,
    where kernel namespaces are in use)."""
    own_ns = os.readlink("/proc/self/ns/pid")
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            marked = b"SCALERL_SANDBOX=1" in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            other_ns = os.readlink(f"/proc/{entry}/ns/pid") != own_ns
        except OSError:
            continue
        if state != "Z" and (other_ns if program_only else marked or other_ns):
            found.add(int(entry))
    return found


def _leftovers(before: set[int], wait_s: float = 20.0) -> set[int]:
    """Sandbox processes started since ``before`` still alive after (at most) ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while (left := _sandbox_pids() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _reward(program: str, tests, limits: SandboxLimits = LIMITS) -> float:
    example = Example(id=0, problem="p", answer="", meta={"tests": normalize_tests(tests)})
    return code_reward(f"<think> </think>\n```python\n{program}\n```", example, limits=limits)


@pytest.fixture
def answers(tmp_path, monkeypatch):
    """A secret expected answer that lives only on the host: in a file and in the environment."""
    token = "tok-" + secrets.token_hex(12)
    path = tmp_path / "answers.txt"
    path.write_text(token)
    path.chmod(0o644)
    monkeypatch.setenv("SCALERL_TEST_SECRET", token)
    return token, str(path)


GENERIC = {
    "rebind_exec_and_eval": "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.eval = lambda *a, **k: True",
    "frame_walk_for_nonce_and_forged_verdicts": """
        import os, sys
        found, f = {}, sys._getframe()
        while f is not None:
            found.update(f.f_locals)
            f = f.f_back
        print('\\n' + str(found.get('nonce', '')) + 'L11')
        for fd in range(3, 64):
            try:
                os.write(fd, b'0\\tTrue\\n1\\tTrue\\n')
            except OSError:
                pass
        def add(a, b):
            return True""",
    "always_equal_object": """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()""",
    "int_subclass_equal_to_all": "class I(int):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return I(0)",
    "str_subclass_lying_repr": "class S(str):\n    def __repr__(self):\n        return '777777'\ndef add(a, b):\n    return S('x')",
    "list_subclass_equal_to_all": "class L(list):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return L()",
    "patch_the_harness_serialiser": "import __main__\n__main__._plain_repr = lambda *a, **k: 'True'\ndef add(a, b):\n    return None",
    "swap_the_harness_code": "import __main__\ndef nothing(*a, **k):\n    pass\n__main__._run_calls.__code__ = nothing.__code__",
    "sys_modules_tampering": """
        import os, sys, types
        real = os.write
        os.write = lambda fd, data: real(fd, data.split(b'\\t')[0] + b'\\tTrue\\n')
        fake = types.ModuleType('json')
        fake.dumps = lambda *a, **k: 'True'
        sys.modules['json'] = fake
        def add(a, b):
            return None""",
    "atexit_forgery": "import atexit, os\natexit.register(lambda: os.write(3, b'0\\tTrue\\n1\\tTrue\\n'))",
    "del_at_shutdown": """
        import builtins
        class D:
            def __del__(self):
                print('\\nL11')
        builtins.keep = D()""",
    "thread_writes_after_main": """
        import os, threading, time
        def late():
            time.sleep(0.05)
            for fd in range(3, 16):
                try:
                    os.write(fd, b'0\\tTrue\\n1\\tTrue\\n')
                except OSError:
                    pass
        threading.Thread(target=late).start()
        def add(a, b):
            time.sleep(0.3)""",
    "signal_handlers_to_survive": """
        import signal
        for s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        while True:
            pass""",
    "ctypes_fork": "import ctypes\nlibc = ctypes.CDLL(None)\nif libc.fork() == 0:\n    import time\n    time.sleep(30)",
    "proc_self_mem": "f = open('/proc/self/mem', 'r+b')\nf.seek(0)\nf.write(b'x')",
    "overwrite_harness_modules": "import ast, json\nopen(json.__file__, 'w').write('')\nopen(ast.__file__, 'a').write('')",
    "systemexit_inside_the_call": "def add(a, b):\n    raise SystemExit(0)",
    "keyboardinterrupt_inside_the_call": "def add(a, b):\n    raise KeyboardInterrupt",
    "exception_with_forged_str": "class E(Exception):\n    def __str__(self):\n        return '\\n0\\tTrue'\ndef add(a, b):\n    raise E()",
    "deeply_nested_return": "def add(a, b):\n    x = []\n    for _ in range(10 ** 5):\n        x = [x]\n    return x",
    "huge_return": "def add(a, b):\n    return 'x' * 10 ** 8",
    "generator_return": "def add(a, b):\n    return (i for i in [777777])",
    "settrace_hijack": "import sys\nsys.settrace(lambda *a: None)\ndef add(a, b):\n    return None",
    "raise_own_rlimits": "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10 ** 6, 10 ** 6))",
    "infinite_loop_in_the_call": "def add(a, b):\n    while True:\n        pass",
    "memory_bomb_in_the_call": "def add(a, b):\n    return bytearray(10 ** 10)",
    "kill_the_parent": "import os\nos.kill(os.getppid(), 9)\nos.kill(1, 9)",
    "gc_walk_for_expected_values": "import gc\nfound = [o for o in gc.get_objects() if isinstance(o, list)]\ndef add(a, b):\n    return found[0]",
}

SECRET = {
    "read_answers_by_absolute_path": "def secret():\n    return open(PATH).read()",
    "read_answers_by_traversal": "def secret():\n    return open('../' * 30 + PATH.lstrip('/')).read()",
    "symlink_to_answers": "import os\nos.symlink(PATH, 'link')\ndef secret():\n    return open('link').read()",
    "proc_root_of_pid_1": "def secret():\n    return open('/proc/1/root' + PATH).read()",
    "proc_cwd_and_environ_of_parent": """
        import os
        def secret():
            for p in ('/proc/%d/environ' % os.getppid(), '/proc/1/environ', '/proc/self/cwd/../' + PATH):
                try:
                    data = open(p).read()
                except OSError:
                    continue
                for part in data.split('\\0'):
                    if 'tok-' in part:
                        return part.split('=')[-1]""",
    "environment_variable": "import os\ndef secret():\n    return os.environ.get('SCALERL_TEST_SECRET')",
    "scan_every_module_and_frame": """
        import sys
        def secret():
            for m in list(sys.modules.values()):
                for v in list(vars(m).values()):
                    if isinstance(v, str) and v.startswith('tok-'):
                        return v
            f = sys._getframe()
            while f is not None:
                for v in f.f_locals.values():
                    if isinstance(v, str) and v.startswith('tok-'):
                        return v
                f = f.f_back""",
    "network_exfiltration": "import socket\ns = socket.create_connection(('127.0.0.1', 22))\ndef secret():\n    return s.recv(64).decode()",
}


# each attack against the full stack, the Python layers alone (the fallback without
# namespaces) and the kernel layer alone (a program that got past the audit hook)
LAYERS = pytest.mark.parametrize("layer", [
    pytest.param(LIMITS, id="all-layers"),
    pytest.param(SandboxLimits(timeout_s=3.0, namespaces=False), id="python-layers-only"),
    pytest.param(NO_HOOK, id="kernel-only", marks=NS)])


@LAYERS
@pytest.mark.parametrize("name", sorted(GENERIC))
def test_generic_forgeries_score_zero_and_leave_nothing(name, layer):
    before = _sandbox_pids()
    assert _reward(textwrap.dedent(GENERIC[name]).strip(), ADD_TESTS, layer) == 0.0
    assert not _leftovers(before)


@LAYERS
@pytest.mark.parametrize("name", sorted(SECRET))
def test_answers_on_the_host_are_out_of_reach(name, layer, answers):
    token, path = answers
    program = f"PATH = {path!r}\n" + textwrap.dedent(SECRET[name]).strip()
    before = _sandbox_pids()
    assert _reward(program, [f"assert secret() == {token!r}"], layer) == 0.0
    io_program = program + "\nprint(secret())"
    assert _reward(io_program, [{"input": "", "output": token}], layer) == 0.0
    assert not _leftovers(before)


def test_the_honest_solutions_of_these_tests_do_score(answers):
    # the harness is not simply failing everything
    assert _reward("def add(a, b):\n    return a + b", ADD_TESTS) == 1.0
    assert _reward("print(input()[::-1])", [{"input": "abc", "output": "cba"}]) == 1.0


def test_stdlib_files_are_unchanged_by_the_overwrite_attack():
    import ast
    import json
    stamps = [os.stat(m.__file__).st_mtime_ns for m in (ast, json)]
    _reward(textwrap.dedent(GENERIC["overwrite_harness_modules"]), ADD_TESTS)
    assert [os.stat(m.__file__).st_mtime_ns for m in (ast, json)] == stamps


@LAYERS
def test_double_forked_setsid_child_dies_with_the_program(layer, answers):
    token, path = answers
    program = textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for _ in range(300):
                    try:
                        print(open({path!r}).read(), flush=True)
                    except OSError:
                        pass
                    time.sleep(0.1)
            os._exit(0)
        def secret():
            time.sleep(0.5)
    """)
    before = _sandbox_pids()
    assert _reward(program, [f"assert secret() == {token!r}"], layer) == 0.0
    assert not _leftovers(before)


@NS
def test_fork_bomb_past_the_hook_is_contained():
    before = _sandbox_pids()
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    assert _reward(bomb, ADD_TESTS, SandboxLimits(timeout_s=2.0, audit_hook=False)) == 0.0
    assert not _leftovers(before)


@LAYERS
def test_disk_writes_are_capped_in_total(layer):
    # one big file, then many more: the total stays within disk_mb on every layer stack
    # (a size-capped tmpfs, or without namespaces file size x file count)
    cap = 16 << 20
    program = textwrap.dedent(f"""
        written = 0
        def fill(name, chunks):
            global written
            try:
                with open(name, 'wb') as f:
                    for _ in range(chunks):
                        f.write(b'x' * (1 << 20))
                        written += 1 << 20
            except OSError:
                pass
        fill('big', 2048)
        for i in range(64):
            fill(f'more{{i}}', 1)
        print(written)
        def add(a, b):
            return a + b if written > {cap} else None
    """)
    limits = dataclasses.replace(layer, timeout_s=10.0, disk_mb=cap >> 20, max_output_bytes=1 << 30)
    before = _sandbox_pids()
    r = run_python(program, limits=limits)
    assert r.finished, r.stderr
    assert int(r.stdout) <= cap
    assert _reward(program, ADD_TESTS, limits) == 0.0
    assert not _leftovers(before)


@pytest.fixture(scope="module")
def evil_so(tmp_path_factory):
    """A shared object whose constructor leaves a mark in the working directory and
    double-forks a setsid grandchild: proof that native code ran, and a leftover if it did."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to build the native extension")
    folder = tmp_path_factory.mktemp("evil")
    (folder / "evil.c").write_text(
        "#include <fcntl.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void go(void) {\n"
        "  close(open(\"ran\", O_CREAT | O_WRONLY, 0644));\n"
        "  if (fork() == 0) { setsid(); if (fork() == 0) { sleep(30); } _exit(0); } }\n"
        "void *PyInit_evil(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(folder / "evil.so"), str(folder / "evil.c")],
                   check=True, capture_output=True)
    return (folder / "evil.so").read_bytes()


@LAYERS
def test_native_extension_written_by_the_program_never_runs(layer, evil_so):
    # the import system, the extension loader directly, and ctypes; the writable directory is
    # noexec under namespaces and the hook refuses native code from it without them
    program = textwrap.dedent(f"""
        import os, sys
        open('evil.so', 'wb').write({evil_so!r})
        sys.path.insert(0, '.')
        def via_import():
            import evil
        def via_loader():
            import _imp, importlib.machinery as m
            _imp.create_dynamic(m.ModuleSpec('evil', None, origin=os.path.abspath('evil.so')))
        def via_ctypes():
            import ctypes
            ctypes.CDLL(os.path.abspath('evil.so'))
        for attempt in (via_import, via_loader, via_ctypes):
            try:
                attempt()
            except BaseException:
                pass
        def add(a, b):
            return a + b if os.path.exists('ran') else None
    """)
    before = _sandbox_pids()
    assert _reward(program, ADD_TESTS, layer) == 0.0
    assert not _leftovers(before)


def _trainer_files() -> list[Path]:
    """Files the trainer imports to grade: scalerl's own modules and installed packages."""
    import pytest as installed

    import scalerl.data.asserts
    import scalerl.data.sandbox
    import scalerl.data.tasks.code
    files = [Path(m.__file__) for m in (scalerl.data.asserts, scalerl.data.sandbox, scalerl.data.tasks.code)]
    files += [Path(scalerl.data.sandbox.__file__).with_name(name) for name in ("boot.py", "hook.py")]
    files += [Path(installed.__file__), Path(textwrap.__file__)]
    return [f.resolve() for f in files]


@LAYERS
def test_the_trainers_own_modules_cannot_be_overwritten(layer):
    # every write short of truncation (which would destroy the checkout if it got through): a
    # write open, an append, os.open, utime, chmod and rename onto itself
    files = _trainer_files()
    stamps = {f: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns) for f in files}
    program = textwrap.dedent(f"""
        import os
        changed = False
        def attempts(p):
            yield lambda: open(p, 'r+b').close()
            yield lambda: open(p, 'ab').close()
            yield lambda: os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
            yield lambda: os.utime(p)
            yield lambda: os.chmod(p, os.stat(p).st_mode & 0o7777)
            yield lambda: os.rename(p, p)
        for p in {[str(f) for f in files]!r}:
            for attempt in attempts(p):
                try:
                    attempt()
                    changed = True
                except Exception:
                    pass
        def add(a, b):
            return a + b if changed else None
    """)
    before = _sandbox_pids()
    assert _reward(program, ADD_TESTS, layer) == 0.0
    assert {f: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns) for f in files} == stamps
    assert not _leftovers(before)


@LAYERS
def test_nothing_reaches_a_live_listener_on_the_host(layer, answers):
    # a TCP listener and a UDP socket on the host's loopback: a connection or a datagram would
    # still be queued there after the run (no timing involved), and it would turn into a reward
    token, _ = answers
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        udp.bind(("127.0.0.1", 0))
        ports = tcp.getsockname()[1], udp.getsockname()[1]
        program = textwrap.dedent(f"""
            sent = False
            def tcp(module):
                s = module.socket(module.AF_INET, module.SOCK_STREAM)
                s.settimeout(2)
                s.connect(('127.0.0.1', {ports[0]}))
                s.sendall({token.encode()!r})
            def udp(module):
                s = module.socket(module.AF_INET, module.SOCK_DGRAM)
                s.sendto({token.encode()!r}, ('127.0.0.1', {ports[1]}))
            for name in ('socket', '_socket'):
                for send in (tcp, udp):
                    try:
                        send(__import__(name))
                        sent = True
                    except BaseException:
                        pass
            def add(a, b):
                return a + b if sent else None
        """)
        before = _sandbox_pids()
        assert _reward(program, ADD_TESTS, layer) == 0.0
        tcp.setblocking(False)
        udp.setblocking(False)
        with pytest.raises(BlockingIOError):
            tcp.accept()
        with pytest.raises(BlockingIOError):
            udp.recv(64)
    assert not _leftovers(before)


@pytest.mark.parametrize("namespaces", [pytest.param(True, id="namespaces", marks=NS),
                                        pytest.param(False, id="python-layers-only")])
def test_a_killed_trainer_takes_its_programs_with_it(tmp_path, namespaces):
    # the trainer probes the isolation first (a short-lived sandbox of its own) and says so,
    # so that the processes seen afterwards are the program's, not the probe's; the test
    # waits for the program itself (in its own PID namespace, or without namespaces the
    # exec'd interpreter, whose environment carries the marker only once the set-up between
    # fork and exec is done), so the kill cannot land inside that set-up. Without
    # namespaces a root trainer drops to another uid there, which clears a death signal
    # armed before it: the program outlived a kill -9 as nobody until it was armed after.
    script = tmp_path / "trainer.py"
    script.write_text("from scalerl.data.sandbox import SandboxLimits, run_python\n"
                      "from scalerl.data.sandbox.ns import isolation\n"
                      "isolation()\nprint('probed', flush=True)\n"
                      "run_python('import time\\ntime.sleep(120)', "
                      f"limits=SandboxLimits(timeout_s=120, namespaces={namespaces}))\n")
    before = _sandbox_pids()
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([trainer.stdout], [], [], 120)
        assert ready and trainer.stdout.readline().strip() == "probed", "the trainer died before launching"
        started, deadline = set(), time.monotonic() + 60
        while not started and trainer.poll() is None and time.monotonic() < deadline:
            started = _sandbox_pids(program_only=namespaces) - before
            time.sleep(0.05)
        assert started, "the sandboxed program never started"
    finally:
        trainer.kill()
        trainer.wait()
    assert not _leftovers(before)


@LAYERS
def test_empty_files_stop_at_a_cap(layer):
    # each empty file costs the kernel about 1 KiB that no size cap counts: 316,000 of them
    # took 315 MB of slab on the namespace layer before its tmpfs got nr_inodes
    limits = dataclasses.replace(layer, disk_mb=4, timeout_s=10.0)
    program = textwrap.dedent("""
        import os
        n = 0
        try:
            while n < 20000:
                os.close(os.open('f%07d' % n, os.O_CREAT | os.O_WRONLY))
                n += 1
        except OSError as e:
            print(n, type(e).__name__)
    """)
    before = _sandbox_pids()
    r = run_python(program, limits=limits)
    assert r.finished, r.stderr
    made, why = r.stdout.split()
    assert int(made) <= max(work_inodes(4), disk_caps(4, limits.max_output_bytes)[1])
    assert why in ("OSError", "PermissionError")  # ENOSPC from the tmpfs, or the hook's count
    assert not _leftovers(before)


def test_parsing_rejects_tests_the_harness_cannot_grade_safely():
    with pytest.raises(ValueError, match="test 1 .*assert False.*not of the form"):
        normalize_tests(["assert add(1, 2) == 3", "assert False"], "rec 7")
