"""The sandbox without kernel namespaces: stale work folders are swept, the disk cap holds as
file size times file count, and the run log gets one warning naming what is missing."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import scalerl.data.sandbox_ns as sandbox_ns
import scalerl.data.tasks.code as code
from scalerl.data.sandbox import SandboxLimits, run_python
from scalerl.data.sandbox_fallback import (
    PREFIX,
    _pid_namespace,
    _start_time,
    disk_caps,
    owner_tag,
    sweep_stale_workdirs,
)

FALLBACK = SandboxLimits(timeout_s=3.0, namespaces=False)


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _workdir(root: Path, pid: int, start: int, with_work: bool = True, pidns: int | None = None) -> Path:
    pidns = _pid_namespace() if pidns is None else pidns
    folder = root / f"{PREFIX}{pidns}-{pid}-{start}-x{len(list(root.iterdir()))}"
    folder.mkdir()
    if with_work:  # like a real run's: a private folder the program wrote into
        (folder / "work").mkdir(mode=0o700)
        (folder / "work" / "out.txt").write_text("left behind")
    return folder


def test_work_folders_of_dead_trainers_are_swept_and_live_ones_kept(tmp_path):
    me, start = os.getpid(), _start_time(os.getpid())
    stale = [_workdir(tmp_path, _dead_pid(), 1),
             _workdir(tmp_path, me, start + 1)]  # this pid, but another process's start time
    live = [_workdir(tmp_path, me, start), _workdir(tmp_path, 1, _start_time(1)),
            _workdir(tmp_path, _dead_pid(), 1, pidns=_pid_namespace() + 1)]  # pids of another namespace
    foreign = [tmp_path / f"{PREFIX}oldstyle", tmp_path / "unrelated"]  # owner unknown: kept
    for f in foreign:
        f.mkdir()
    removed = sweep_stale_workdirs(str(tmp_path))
    assert sorted(removed) == sorted(str(f) for f in stale)
    assert not any(f.exists() for f in stale) and all(f.exists() for f in live + foreign)


def test_without_proc_nothing_is_swept(tmp_path, monkeypatch):
    # every owner would read as namespace 0: no trainer could be told alive or gone
    import scalerl.data.sandbox_fallback as fallback

    monkeypatch.setattr(fallback, "_pid_namespace", lambda: 0)
    folder = _workdir(tmp_path, _dead_pid(), 1, pidns=0)
    assert sweep_stale_workdirs(str(tmp_path)) == [] and folder.exists()


@pytest.fixture
def temp_root(monkeypatch):
    """A fresh temp dir for the sandbox's work folders, traversable by the dropped user."""
    root = Path(tempfile.mkdtemp(prefix="scalerl-test-root-"))
    root.chmod(0o711)
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_sandbox_start_sweeps_its_temp_dir_and_leaves_no_folder_of_its_own(temp_root):
    tmp_path = temp_root
    stale = _workdir(tmp_path, _dead_pid(), 1)
    r = run_python("import os\nprint(os.getcwd())", limits=FALLBACK)
    assert r.finished and r.stdout.startswith(str(tmp_path / f"{PREFIX}{owner_tag()}-"))
    assert not stale.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("disk_mb, max_output", [(64, 1 << 20), (16, 1 << 30), (1, 1 << 20), (5, 3 << 20)])
def test_disk_caps_bound_the_total(disk_mb, max_output):
    fsize, max_files = disk_caps(disk_mb, max_output)
    assert fsize <= max_output and max_files >= 1 and fsize * max_files <= disk_mb << 20


def test_the_file_count_cap_stops_a_program_without_namespaces():
    limits = SandboxLimits(timeout_s=3.0, namespaces=False, disk_mb=4, max_output_bytes=1 << 20)
    _, max_files = disk_caps(4, 1 << 20)
    src = ("import os\nn = 0\ntry:\n    for i in range(100):\n        os.mkdir(f'd{i}') if i % 2 else open(f'f{i}', 'w').close()\n"
           "        n += 1\nexcept PermissionError as e:\n    print(n, e)\n")
    r = run_python(src, limits=limits)
    assert r.finished and r.stdout.split()[0] == str(max_files) and "files written" in r.stdout


@pytest.fixture
def no_namespaces(monkeypatch):
    """The namespace probe fails as it does where unprivileged user namespaces are off."""
    monkeypatch.setattr(sandbox_ns, "_probe", lambda user_namespace: "unshare: unshare failed: Operation not permitted")
    monkeypatch.delenv(code.ANNOUNCED, raising=False)
    sandbox_ns.isolation.cache_clear()
    code._announce_isolation.cache_clear()
    yield
    sandbox_ns.isolation.cache_clear()
    code._announce_isolation.cache_clear()
    os.environ.pop(code.ANNOUNCED, None)


def test_without_namespaces_one_warning_names_what_is_missing(no_namespaces, capsys):
    iso = sandbox_ns.isolation()
    assert not iso.namespaces and "Operation not permitted" in iso.missing
    line = iso.describe()
    assert "\n" not in line and line.startswith("code sandbox WARNING: no kernel namespaces")
    assert iso.missing in line and "audit hook" in line and "leave processes behind" in line
    assert "file count" in line  # what the disk cap is instead of a size-capped filesystem
    r = run_python("import os\nprint(os.getcwd())")  # default limits: the fallback is used
    assert r.finished and r.stdout.startswith(tempfile.gettempdir() + "/" + PREFIX)
    for _ in range(3):  # three code tasks built in this process
        code._announce_isolation()
    assert capsys.readouterr().err == line + "\n"
    assert os.environ[code.ANNOUNCED] == str(os.getpid())  # the mark its generators inherit


def test_generator_children_of_an_announcer_stay_quiet(no_namespaces, capsys, monkeypatch):
    class Parent:
        pid = 4242

    monkeypatch.setenv(code.ANNOUNCED, "4242")
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: Parent)
    code._announce_isolation()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: None)  # e.g. a sweep's run
    code._announce_isolation.cache_clear()
    code._announce_isolation()
    assert "WARNING" in capsys.readouterr().err
