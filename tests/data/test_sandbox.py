import os
import time

import pytest

from scalerl.data.sandbox import SandboxLimits, run_python

FAST = SandboxLimits(timeout_s=2.0)


def test_ordinary_program_reads_stdin_and_writes_stdout():
    r = run_python("import collections\nn = int(input())\nprint(n * 2)", stdin="21\n")
    assert r.reported and r.loaded and r.stdout == "42\n" and not r.timed_out


def test_assert_mode_scores_each_snippet():
    r = run_python("def f(x):\n    return x + 1", tests=["assert f(1) == 2", "assert f(1) == 3"],
                   mode="asserts")
    assert r.results == [True, False]


def test_infinite_loop_is_stopped_at_the_wall_clock_limit():
    t0 = time.monotonic()
    r = run_python("while True:\n    pass", limits=FAST)
    assert r.timed_out and not r.reported and time.monotonic() - t0 < 6


def test_sleeping_program_is_killed_too():
    r = run_python("import time\ntime.sleep(60)", limits=SandboxLimits(timeout_s=1.0))
    assert r.timed_out and r.seconds < 4


def test_memory_bomb_is_refused():
    r = run_python("x = bytearray(4 * 10**9)\nprint('allocated')", limits=FAST)
    assert "allocated" not in r.stdout and not r.loaded
    r = run_python("x = []\nwhile True:\n    x.append(bytearray(10**7))", limits=FAST)
    assert not r.loaded


@pytest.mark.parametrize("bomb", [
    "import os\nwhile True:\n    os.fork()",
    "import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])",
    "import os\nos.system('sleep 30 &')",
    "import multiprocessing\nmultiprocessing.Process(target=print).start()",
])
def test_process_creation_is_blocked(bomb):
    r = run_python(bomb, limits=FAST)
    assert r.reported and not r.loaded and not r.timed_out


def test_reads_outside_the_sandbox_are_blocked():
    for src in ("print(open('/etc/passwd').read())",
                "print(open('../../../../etc/passwd').read())",
                "import os\nprint(os.listdir('/'))",
                "import pathlib\nprint(pathlib.Path('/etc/hostname').read_text())"):
        r = run_python(src, limits=FAST)
        assert not r.loaded and "root:" not in r.stdout and "PermissionError" in r.stderr


def test_writes_stay_inside_the_sandbox_directory(tmp_path):
    r = run_python("open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read())")
    assert r.loaded and r.stdout == "ok\n"
    target = tmp_path / "escaped.txt"
    r = run_python(f"open({str(target)!r}, 'w').write('x')", limits=FAST)
    assert not r.loaded and not target.exists()


def test_network_is_blocked():
    src = "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 22))"
    r = run_python(src, limits=FAST)
    assert not r.loaded and "PermissionError" in r.stderr


def test_program_cannot_disable_the_audit_hook():
    src = ("import sys\nhook = sys._getframe(1).f_locals['hook']\n"
           "hook.__defaults__ = (None,)\nprint(open('/etc/passwd').read())")
    r = run_python(src, limits=FAST)
    assert not r.loaded and "root:" not in r.stdout


def test_forged_verdicts_and_early_exit_do_not_pass():
    r = run_python("import sys\nprint('\\nabcdefL111')\nsys.exit(0)",
                   tests=["assert False"], mode="asserts", limits=FAST)
    assert r.results == [False]
    r = run_python("import os\nos._exit(0)", tests=["assert True"], mode="asserts", limits=FAST)
    assert not r.reported and r.results == []


@pytest.mark.skipif(os.geteuid() != 0, reason="privilege drop needs root")
def test_runs_as_nobody_when_trainer_is_root():
    r = run_python("import os\nprint(os.getuid(), os.getgid())")
    assert r.stdout == "65534 65534\n"


def test_output_flood_is_capped():
    r = run_python("print('x' * 10**8)", limits=SandboxLimits(max_output_bytes=1 << 16))
    assert len(r.stdout) <= 1 << 16 and not r.loaded
