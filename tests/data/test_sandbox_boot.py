"""The Python layer (``sandbox_boot.py``) refuses what no audit event reports.

Python 3.11 raises no audit event for ``os.mkfifo``/``os.mknod``, for making a builtin module
afresh, or for a relative path resolved from a directory fd; and native code or crafted
bytecode gets past any hook. Without kernel namespaces these are the holes, so each attack is
run on the full stack and on the Python layers alone, and turns into a reward if it worked.
The control runs the same programs with the hook off (the kernel layer alone, which contains
them in its own way): there they do score, so the zeros are the hook's doing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
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

from scalerl.data.sandbox import SandboxLimits

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


@pytest.mark.parametrize("layer", [pytest.param(LIMITS, id="all-layers"),
                                   pytest.param(SandboxLimits(timeout_s=3.0, namespaces=False), id="python-layers-only")])
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
