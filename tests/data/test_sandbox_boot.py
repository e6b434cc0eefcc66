"""The Python layer (``sandbox_hook.py``) refuses what no audit event reports.

Python 3.11 raises no audit event for ``os.mkfifo``/``os.mknod``, for making a builtin module
afresh, or for a relative path resolved from a directory fd; and native code or crafted
bytecode gets past any hook. Without kernel namespaces these are the holes, so each attack is
run on the full stack and on the Python layers alone, and turns into a reward if it worked.
The control runs the same programs with the hook off (the kernel layer alone, which contains
them in its own way): there they do score, so the zeros are the hook's doing.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

# the attack suite's helpers: the reward of a program, and the sandbox processes still alive
from test_sandbox_escapes import (
    ADD_TESTS,
    LAYERS,
    LIMITS,
    NO_HOOK,
    NS,
    _leftovers,
    _reward,
    _sandbox_pids,
)

from scalerl.data import sandbox
from scalerl.data.sandbox import SandboxLimits
from scalerl.data.sandbox.fallback import fallback_python

# the stacks the audit hook is part of (the kernel layer alone lets these attacks through)
HOOK_LAYERS = pytest.mark.parametrize("layer", [
    pytest.param(LIMITS, id="all-layers"),
    pytest.param(SandboxLimits(timeout_s=3.0, namespaces=False), id="python-layers-only")])

# Every route to a node maker: the os/posix functions, a reloaded os or posix, os.supports_*,
# and a freshly made posix module (through sys.modules or the builtin-module constructor).
FIND_MAKERS = textwrap.dedent("""
    import importlib, os, sys
    makers = []
    def collect(module):
        makers.extend(getattr(module, n) for n in ('mkfifo', 'mknod') if hasattr(module, n))
    def fresh_posix():
        import _imp, importlib.machinery as m
        return _imp.create_builtin(m.ModuleSpec('posix', m.BuiltinImporter))
    def reimported_posix():
        sys.modules.pop('posix', None)
        return importlib.import_module('posix')
    for get in (lambda: os, lambda: sys.modules['posix'], lambda: importlib.reload(os),
                lambda: importlib.reload(sys.modules['posix']), fresh_posix, reimported_posix):
        try:
            collect(get())
        except Exception:
            pass
    for name in ('supports_dir_fd', 'supports_fd', 'supports_follow_symlinks'):
        makers.extend(f for f in getattr(os, name, ()) if getattr(f, '__name__', '') in ('mkfifo', 'mknod'))
""")

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial


@LAYERS
def test_fifos_and_device_nodes_cannot_be_made_outside(layer):
    # targets the dropped user could write to if nothing else stopped it: a world-writable
    # folder, /tmp itself and /dev/shm; a node made anywhere would turn into a reward
    shared = Path(tempfile.mkdtemp(prefix="scalerl-test-nodes-"))
    shared.chmod(0o1777)
    tag = secrets.token_hex(4)
    targets = [shared / "fifo", shared / "null", Path(f"/tmp/scalerl-fifo-{tag}"), Path(f"/dev/shm/scalerl-fifo-{tag}")]
    program = FIND_MAKERS + textwrap.dedent(f"""
        made = False
        for target in {[str(t) for t in targets]!r}:
            for make in makers:
                for args in ((target,), (target, 0o10666), (target, 0o20666, os.makedev(1, 3))):
                    try:
                        make(*args)
                        made = True
                    except Exception:
                        pass
        def add(a, b):
            return a + b if made else None
    """)
    try:
        before = _sandbox_pids()
        assert _reward(program, ADD_TESTS, layer) == 0.0
        assert not [t for t in targets if os.path.lexists(t)]
        assert not _leftovers(before)
    finally:
        for t in targets:
            with contextlib.suppress(OSError):
                os.unlink(t)
        shutil.rmtree(shared, ignore_errors=True)


# Routes to native code or to the file system that raise no audit event, or that the hook
# must refuse although the kernel layer would contain them: each would score if it worked.
# With the hook off (kernel layer alone) every one does work, which shows they are real.
UNAUDITED_PRELUDE = "ADD = 'def add(a, b):\\n    return a + b'\n"
UNAUDITED = {
    "unmarshal_crafted_code": "import marshal\nexec(marshal.loads(marshal.dumps(compile(ADD, 's', 'exec'))))",
    "frozen_module_from_own_bytes": """
        import _imp, marshal
        exec(_imp.get_frozen_object('os', marshal.dumps(compile(ADD, 's', 'exec'))))""",
    "import_systems_bytecode_entry": """
        import marshal
        from importlib import _bootstrap_external as b
        exec(b._compile_bytecode(marshal.dumps(compile(ADD, 's', 'exec'))))""",
    "sourceless_pyc_in_the_work_dir": """
        import importlib.util, marshal, sys
        code = marshal.dumps(compile(ADD, 'evil.py', 'exec'))
        open('evil.pyc', 'wb').write(importlib.util.MAGIC_NUMBER + bytes(12) + code)
        sys.path.insert(0, '.')
        from evil import add""",
    "fifo_in_the_work_dir_after_restoring_mkfifo": FIND_MAKERS + """
for make in makers:
    try:
        make('fifo')
    except Exception:
        pass
if os.path.exists('fifo'):
    exec(ADD)""",
    "symlink_in_the_work_dir": "import os\nos.symlink('target', 'link')\nexec(ADD)",
    "directory_fd_outside_the_work_dir": "import os\nos.close(os.open(os.path.dirname(os.__file__), os.O_RDONLY))\nexec(ADD)",
    "relative_climb_from_a_directory_fd": """
        import os
        os.mkdir('d')
        os.close(os.open('../x', os.O_CREAT | os.O_WRONLY, dir_fd=os.open('d', os.O_RDONLY)))
        exec(ADD)""",
    "builtin_module_made_afresh": """
        import _imp, importlib.machinery as m
        _imp.create_builtin(m.ModuleSpec('posix', m.BuiltinImporter))
        exec(ADD)""",
    "native_module_off_the_allow_list": "import pwd\nexec(ADD)",
    "blocked_extension_under_another_name": """
        import _imp, glob, os, importlib.machinery as m
        so = glob.glob(os.path.dirname(os.__file__) + '/lib-dynload/_posixsubprocess*.so')
        _imp.create_dynamic(m.ModuleSpec('x._posixsubprocess', None, origin=so[0]))
        exec(ADD)""",
}


@HOOK_LAYERS
@pytest.mark.parametrize("name", sorted(UNAUDITED))
def test_the_python_layer_refuses_what_no_audit_event_reports(name, layer):
    program = UNAUDITED_PRELUDE + textwrap.dedent(UNAUDITED[name]).strip()
    before = _sandbox_pids()
    assert _reward(program, ADD_TESTS, layer) == 0.0
    assert not _leftovers(before)


@NS
@pytest.mark.parametrize("name", sorted(set(UNAUDITED) - {"blocked_extension_under_another_name"}))
def test_those_routes_are_real_where_the_hook_is_off(name):
    # the control: without the hook the same programs score, so a 0 above is the hook's doing
    # (the renamed extension exists as a file only in some Python builds, so it is left out)
    program = UNAUDITED_PRELUDE + textwrap.dedent(UNAUDITED[name]).strip()
    assert _reward(program, ADD_TESTS, NO_HOOK) == 1.0


# Every route to a signal that leaves the program, or to a handler or timer: the os, signal
# and _signal functions, reloaded modules, a freshly made _signal, and os.supports_*. Each
# entry of ``found`` is (name, function); a program that signals a victim or installs a
# handler through any of them turns that into a reward.
FIND_SIGNALLERS = textwrap.dedent("""
    import faulthandler, importlib, os, signal, sys, threading
    NAMES = ('pidfd_open', 'pidfd_send_signal', 'kill', 'killpg', 'pthread_kill', 'signal',
             'setitimer', 'alarm', 'set_wakeup_fd', 'siginterrupt', 'register', 'enable')
    found = []
    def collect(module):
        found.extend((n, getattr(module, n)) for n in NAMES if hasattr(module, n))
    def fresh(name):
        import _imp, importlib.machinery as m
        return _imp.create_builtin(m.ModuleSpec(name, m.BuiltinImporter))
    for get in (lambda: os, lambda: sys.modules['posix'], lambda: signal, lambda: faulthandler,
                lambda: sys.modules['_signal'], lambda: importlib.reload(signal),
                lambda: importlib.reload(sys.modules['_signal']), lambda: fresh('_signal'),
                lambda: fresh('posix')):
        try:
            collect(get())
        except Exception:
            pass
    for name in ('supports_fd', 'supports_dir_fd', 'supports_follow_symlinks'):
        found.extend((f.__name__, f) for f in getattr(os, name, ()) if f.__name__ in NAMES)
""")


def _signal_attempts(found: str, pids: list[int] | str) -> str:
    """Program text that calls every function of ``found`` on each process of ``pids`` (a
    list, or the source text of one), with SIGKILL, or to install a handler or timer;
    ``worked`` ends True if any call returned."""
    return textwrap.dedent(f"""
        worked = False
        def attempts(name, f, pid):
            if name == 'pidfd_open':
                yield lambda: f(pid)
            elif name == 'pidfd_send_signal':
                for opener in [g for n, g in {found} if n == 'pidfd_open']:
                    yield lambda opener=opener: f(opener(pid), 9)
            elif name in ('kill', 'killpg'):
                yield lambda: f(pid, 9)
                yield lambda: f(-pid, 9)
            elif name == 'pthread_kill':
                yield lambda: f(threading.get_ident(), 0)
            elif name in ('signal', 'siginterrupt'):
                yield lambda: f(signal.SIGTERM, signal.SIG_IGN if name == 'signal' else True)
            elif name in ('setitimer', 'alarm'):
                yield lambda: f(signal.ITIMER_REAL, 100.0) if name == 'setitimer' else f(100)
            elif name == 'set_wakeup_fd':
                yield lambda: f(-1)
            elif name in ('register', 'enable'):
                yield lambda: f(signal.SIGUSR1) if name == 'register' else f()
        for name, f in {found}:
            for pid in {pids if isinstance(pids, str) else repr(pids)}:
                for attempt in attempts(name, f, pid):
                    try:
                        attempt()
                        worked = True
                    except Exception:
                        pass
        def add(a, b):
            return a + b if worked else None
    """)


@pytest.fixture
def victim():
    """A process the programs' fallback user could have signalled: ``nobody``'s (root
    trainers ran every program as nobody), or this user's own where the tests are not root."""
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    if drop and shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to start a process as nobody")
    proc = subprocess.Popen([*drop, "sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@HOOK_LAYERS
def test_no_signal_leaves_the_program_and_no_handler_is_installed(layer, victim):
    # pidfd_open + pidfd_send_signal raise no audit event: they killed nobody's processes
    # and concurrent programs as root, and the trainer itself as a plain user; os.kill,
    # killpg and pthread_kill are audited and refused; handlers and timers are removed
    program = FIND_SIGNALLERS + _signal_attempts("found", [victim.pid])
    before = _sandbox_pids()
    assert _reward(program, ADD_TESTS, layer) == 0.0
    assert victim.poll() is None
    assert not _leftovers(before)


def test_the_signal_routes_exist_where_no_hook_removes_them():
    # the control: in a plain interpreter the same search finds every kind of function, so
    # an empty ``found`` in the sandbox is the seal's doing, not the search failing
    code = FIND_SIGNALLERS + "print(sorted({n for n, _ in found}))"
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    names = set(ast.literal_eval(out.stdout))
    assert {"pidfd_open", "pidfd_send_signal", "kill", "killpg", "signal", "setitimer", "register"} <= names


@LAYERS
def test_honest_threads_and_futures_still_run(layer):
    program = textwrap.dedent("""
        import queue, threading
        from concurrent.futures import ThreadPoolExecutor
        def add(a, b):
            with ThreadPoolExecutor(4) as ex:
                parts = list(ex.map(lambda x: x, [a, b]))
            q = queue.Queue()
            t = threading.Thread(target=lambda: q.put(sum(parts)))
            t.start()
            t.join()
            return q.get()
    """)
    assert _reward(program, ADD_TESTS, layer) == 1.0


@HOOK_LAYERS
def test_a_thread_moving_the_working_directory_cannot_redirect_a_path(layer):
    # the hook judged a relative path from getcwd() at check time; a thread flipping the cwd
    # made ~1% of opens land elsewhere (a stdlib directory fd, a file in a writable folder
    # outside). Now the cwd cannot leave the work dir, and paths are judged from it.
    outside = Path(tempfile.mkdtemp(prefix="scalerl-test-cwd-"))
    outside.chmod(0o1777)
    program = f"OUTSIDE = {str(outside)!r}\n" + textwrap.dedent("""
        import os, threading
        START, STDLIB = os.getcwd(), os.path.dirname(os.__file__)
        got, stop = [], []
        def flip():
            while not stop:
                for d in (OUTSIDE, STDLIB, '/'):
                    try:
                        os.chdir(d)
                        got.append('chdir')
                    except OSError:
                        pass
                    try:
                        os.fchdir(os.open(d, os.O_RDONLY))
                        got.append('fchdir')
                    except OSError:
                        pass
        threading.Thread(target=flip).start()
        for i in range(2000):
            try:
                os.close(os.open('x%d' % i, os.O_CREAT | os.O_WRONLY))
            except OSError:
                pass
            try:  # the stdlib's json package: a directory fd, were the cwd the stdlib
                os.close(os.open('json', os.O_RDONLY))
                got.append('json')
            except OSError:
                pass
        stop.append(1)
        def add(a, b):
            return a + b if got or os.getcwd() != START else None
    """)
    try:
        assert _reward(program, ADD_TESTS, dataclasses.replace(layer, timeout_s=10.0)) == 0.0
        assert list(outside.iterdir()) == []
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def _hook_module():
    """``sandbox_hook``'s functions, loaded as a module of their own (nothing runs)."""
    path = Path(sandbox.__file__).with_name("hook.py")
    spec = importlib.util.spec_from_file_location("sandbox_hook_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hook_judges_a_symlink_by_where_it_leads(tmp_path):
    # a read root holding a link to a file outside every root (as Debian's stdlib holds
    # sitecustomize.py -> /etc/...), a link to a file inside, and a chain of relative links
    boot = _hook_module()
    root, work, elsewhere = tmp_path / "stdlib", tmp_path / "work", tmp_path / "elsewhere"
    for d in (root, work, elsewhere, root / "pkg"):
        d.mkdir()
    (elsewhere / "secret.txt").write_text("s")
    (root / "mod.py").write_text("x = 1")
    (root / "out.py").symlink_to(elsewhere / "secret.txt")
    (root / "in.py").symlink_to("mod.py")
    (root / "pkg" / "up").symlink_to("..")
    (root / "pkg" / "hop").symlink_to("../out.py")
    cfg = list(boot._audit_config(os, sys, str(work), None))
    cfg[1], cfg[2] = (str(work), str(root)), (str(root),)
    cfg = tuple(cfg)
    allowed = [root / "mod.py", root / "in.py", root / "pkg" / "up" / "mod.py"]
    refused = [root / "out.py", root / "pkg" / "hop", root / "pkg" / "up" / "out.py", elsewhere / "secret.txt"]
    for path in allowed:
        boot._hook("open", (str(path), "r", os.O_RDONLY), cfg)
    for path in refused:
        with pytest.raises(PermissionError, match="cannot open"):
            boot._hook("open", (str(path), "r", os.O_RDONLY), cfg)
    assert boot._resolve(str(root / "pkg" / "hop"), cfg) == str(elsewhere / "secret.txt")
    loop = root / "loop"
    loop.symlink_to("loop")
    assert boot._resolve(str(loop), cfg) is None


def test_a_symlink_in_the_standard_library_leads_nowhere_outside():
    # end to end, with the links the fallback interpreter's stdlib holds at its top (Debian's
    # sitecustomize.py -> /etc/python3.X/...): 155 bytes were read through one before
    layer = SandboxLimits(timeout_s=3.0, namespaces=False)
    code = ("import os\nroot = os.path.realpath(os.path.dirname(os.__file__))\n"
            "for f in os.listdir(root):\n    p, t = os.path.join(root, f), os.path.realpath(os.path.join(root, f))\n"
            "    if os.path.islink(p) and os.path.isfile(t) and not t.startswith(root + '/'):\n"
            "        print(p)\n")
    links = subprocess.run([fallback_python(), "-I", "-S", "-c", code], capture_output=True, text=True).stdout.split()
    if not links:
        pytest.skip(f"{fallback_python()}'s standard library holds no symlink to a file outside it")
    program = f"LINKS = {links!r}\n" + textwrap.dedent("""
        read = []
        for p in LINKS:
            try:
                read.append(open(p, 'rb').read())
            except OSError:
                pass
        def add(a, b):
            return a + b if read else None
    """)
    assert _reward(program, ADD_TESTS, layer) == 0.0
