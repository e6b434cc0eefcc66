"""The sandbox without kernel namespaces: stale work folders are swept, the disk cap holds as
file size times file count, and the run log gets one warning naming what is missing."""

from __future__ import annotations

import contextlib
import fcntl
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import scalerl.data.sandbox as sandbox
import scalerl.data.sandbox.ns as sandbox_ns
import scalerl.data.sandbox.uids as sandbox_uids
import scalerl.data.tasks.code as code
from scalerl.data.sandbox import SandboxLimits, run_python
from scalerl.data.sandbox.fallback import (
    PREFIX,
    _pid_namespace,
    _start_time,
    disk_caps,
    owner_tag,
    sweep_stale_workdirs,
)

FALLBACK = SandboxLimits(timeout_s=3.0, namespaces=False)

# serial: these tests run sandboxed programs, and some scan and kill the machine's marked
# programs or hold uids of the pool; make test runs them after the parallel part
pytestmark = pytest.mark.serial


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
    import scalerl.data.sandbox.fallback as fallback

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


def _threads(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:")), 0)


def _marked_programs() -> set[int]:
    """Live processes carrying the sandbox's environment marker."""
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if b"SCALERL_SANDBOX=1" in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.add(int(entry))
    return found


@pytest.mark.parametrize("namespaces", [
    pytest.param(True, id="namespaces", marks=pytest.mark.skipif(
        not sandbox_ns.isolation().namespaces, reason=f"no kernel namespaces: {sandbox_ns.isolation().missing}")),
    pytest.param(False, id="python-layers-only", marks=pytest.mark.skipif(
        os.geteuid() != 0, reason="without root every fallback program runs as the trainer's own uid "
                                  "and shares its RLIMIT_NPROC budget (see docs/design/data.md)"))])
def test_a_thread_bomb_leaves_a_concurrent_program_its_own_process_budget(namespaces):
    # RLIMIT_NPROC counts a user's tasks: with every program run as nobody, one holding its 63
    # threads made a concurrent honest ThreadPoolExecutor fail ("can't start new thread").
    # The bomb is observed holding its threads before the honest program starts; no timing.
    limits = SandboxLimits(timeout_s=60.0, namespaces=namespaces)
    bomb = ("import threading, time\nthreading.stack_size(65536)\n"
            "for _ in range(63):\n"
            "    try:\n        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "    except RuntimeError:\n        break\ntime.sleep(60)\n")
    honest = ("from concurrent.futures import ThreadPoolExecutor\n"
              "with ThreadPoolExecutor(8) as ex:\n    print(sum(ex.map(lambda x: x * x, range(100))))\n")
    before, result = _marked_programs(), {}
    runner = threading.Thread(target=lambda: result.setdefault("bomb", run_python(bomb, limits=limits)))
    runner.start()
    try:
        holding, deadline = [], time.monotonic() + 30
        while not holding and time.monotonic() < deadline:
            holding = [p for p in _marked_programs() - before if _threads(p) >= 60]
            time.sleep(0.05)
        assert holding, "the bomb never held its threads"
        r = run_python(honest, limits=SandboxLimits(timeout_s=10.0, namespaces=namespaces))
        assert r.finished and r.stdout.strip() == "328350", r.stderr
    finally:
        for pid in _marked_programs() - before:  # the bomb, ended now rather than at 60 s
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        runner.join(60)
    assert not runner.is_alive() and not result["bomb"].finished


@pytest.mark.skipif(not sandbox_uids.pool_usable(), reason="the uid pool needs root and its uids mapped here")
def test_concurrent_leases_get_distinct_uids_and_closing_gives_one_back():
    leases = [sandbox_uids.lease_uid() for _ in range(8)]
    uids = [uid for uid, _ in leases]
    assert len(set(uids)) == 8
    assert all(sandbox_uids.BASE <= uid < sandbox_uids.BASE + sandbox_uids.SIZE for uid in uids)
    first_uid, first_fd = leases[0]
    probe = os.open(os.path.join(sandbox_uids.POOL_DIR, str(first_uid)), os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):  # held: another trainer's lease of it fails
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(first_fd)
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # given back
    finally:
        os.close(probe)
        for _, fd in leases[1:]:
            os.close(fd)


def test_the_pool_is_unused_without_root_and_a_foreign_pool_dir_never(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox_uids.os, "geteuid", lambda: 1000)
    sandbox_uids.forget()
    try:
        assert sandbox_uids.lease_uid() is None
        monkeypatch.undo()
        if os.geteuid() != 0:
            pytest.skip("the foreign-directory case needs root")
        foreign = tmp_path / "pool"
        foreign.mkdir(mode=0o777)
        foreign.chmod(0o777)  # writable by anyone: another user could hold every lock in it
        monkeypatch.setattr(sandbox_uids, "POOL_DIR", str(foreign))
        monkeypatch.setenv(sandbox_uids.PRIVATE_ENV, "")  # none inherited; the one made is undone after
        monkeypatch.setattr(sandbox_uids.tempfile, "tempdir", str(tmp_path))
        sandbox_uids.forget()
        lease = sandbox_uids.lease_uid()  # through a private folder where the uids can be leased
        if lease is not None:
            os.close(lease[1])
        assert not any(foreign.iterdir())  # never through the foreign one
    finally:
        sandbox_uids.forget()


POOL_NEEDS = pytest.mark.skipif(
    os.geteuid() != 0 or not (sandbox_uids._mapped("/proc/self/uid_map") and sandbox_uids._mapped("/proc/self/gid_map")),
    reason="the uid pool needs root and its uids mapped here")


@POOL_NEEDS
@pytest.mark.parametrize("squat", ["another_users_folder", "open_to_others", "a_symlink", "replaceable_parent"])
def test_a_pool_folder_that_is_not_the_trainers_own_is_never_used_and_a_private_one_is(squat, tmp_path, monkeypatch):
    # probe N15: a local user who made $TMPDIR/scalerl-sandbox-uids first sent every program
    # back to the shared nobody (review 3: still so, with a warning); now the trainer leases
    # its uids through a private folder of its own, which its spawned processes share
    tmp = tmp_path / ("open" if squat == "replaceable_parent" else "tmp")
    tmp.mkdir()
    pool = tmp / "scalerl-sandbox-uids"
    if squat == "a_symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        pool.symlink_to(tmp_path / "elsewhere")
    else:
        pool.mkdir(mode=0o700)
    if squat == "another_users_folder":
        os.chown(pool, 4242, 4242)
    elif squat == "open_to_others":
        pool.chmod(0o707)
    elif squat == "replaceable_parent":
        tmp.chmod(0o777)  # writable by all and not sticky: anyone may rename the pool away
    monkeypatch.setattr(sandbox_uids, "POOL_DIR", str(pool))
    monkeypatch.setattr(sandbox_ns, "isolation", lambda: sandbox_ns.Isolation(True, False))
    monkeypatch.setattr(code, "isolation", sandbox_ns.isolation)
    monkeypatch.setenv(sandbox_uids.PRIVATE_ENV, "")  # none inherited; the one made is undone after
    monkeypatch.setattr(sandbox_uids.tempfile, "tempdir", str(tmp_path))  # the private folder's parent
    sandbox_uids.forget()
    lease = None
    try:
        lease = sandbox_uids.lease_uid()
        assert lease is not None and sandbox_uids.BASE <= lease[0] < sandbox_uids.BASE + sandbox_uids.SIZE
        private = os.environ[sandbox_uids.PRIVATE_ENV]  # a spawned generator inherits it
        assert os.path.dirname(private) == str(tmp_path) and (os.stat(private).st_mode & 0o777) == 0o700
        assert str(lease[0]) in os.listdir(private)
        lines = code.isolation_lines()
        warnings = [line for line in lines if "uid pool" in line]
        assert len(lines) == 2 and len(warnings) == 1
        assert str(pool) in warnings[0] and private in warnings[0] and "nobody" not in warnings[0]
        assert warnings[0].count(". ") == 0 and "\n" not in warnings[0]  # one sentence
        assert not any(pool.resolve().iterdir())  # no lease file was made in it
        sandbox_uids.forget()  # as a spawned generator decides it: the same private folder
        assert sandbox_uids._pool()[0] == private
    finally:
        if lease is not None:
            os.close(lease[1])
        sandbox_uids.forget()


@POOL_NEEDS
def test_a_private_root_owned_pool_folder_is_used_without_a_warning(tmp_path, monkeypatch):
    pool = tmp_path / "scalerl-sandbox-uids"  # made by the trainer itself, 0700, in a private folder
    monkeypatch.setattr(sandbox_uids, "POOL_DIR", str(pool))
    monkeypatch.setattr(sandbox_ns, "isolation", lambda: sandbox_ns.Isolation(True, False))
    monkeypatch.setattr(code, "isolation", sandbox_ns.isolation)
    sandbox_uids.forget()
    try:
        lease = sandbox_uids.lease_uid()
        assert lease is not None and sandbox_uids.pool_warning() is None
        os.close(lease[1])
        assert len(code.isolation_lines()) == 1
    finally:
        sandbox_uids.forget()


# Run as an unprivileged trainer: the programs keep its uid (the fallback), or are root of a
# user namespace of their own (the namespace layer, where the machine allows it). Each
# attack of the probe that reached the trainer or its user's files is tried; the script
# prints what survived.
AS_USER_TRAINER = r'''
import json, os, subprocess, sys, tempfile
from scalerl.data.sandbox import SandboxLimits, run_python
from scalerl.data.sandbox.ns import isolation
namespaces = sys.argv[1] == "ns"
sibling = subprocess.Popen(["sleep", "60"])   # this user's: a kill target for the fallback's uid
outside = tempfile.mkdtemp(prefix="scalerl-user-outside-")   # this user may write it
signals = sys.stdin.read().replace("PIDS", repr([os.getpid(), sibling.pid]))
race = """
import os, threading
stop = []
def flip():
    while not stop:
        try:
            os.chdir(OUTSIDE)
        except OSError:
            pass
threading.Thread(target=flip).start()
for i in range(1000):
    try:
        os.close(os.open('x%d' % i, os.O_CREAT | os.O_WRONLY))
    except OSError:
        pass
stop.append(1)
""".replace("OUTSIDE", repr(outside))
limits = SandboxLimits(timeout_s=10.0, namespaces=namespaces)
out = {"layer": "ns" if namespaces and isolation().namespaces else "fallback", "uid": os.getuid()}
out["signals"] = run_python(signals + "\nprint('WORKED' if worked else 'HELD')", limits=limits).stdout.strip()
out["race_finished"] = run_python(race, limits=limits).finished
out["outside"] = os.listdir(outside)
out["sibling_alive"] = sibling.poll() is None
sibling.kill()
print(json.dumps(out))
'''


def _unprivileged_python() -> tuple[list[str], str]:
    """``(argv prefix, python)`` that runs this checkout's sandbox as a user other than root
    (``nobody`` through setpriv when the tests run as root, else this user itself)."""
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    if drop and shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run a trainer as nobody")
    src = str(Path(sandbox_ns.__file__).parents[3])
    for python in dict.fromkeys([os.path.realpath(sys.executable), shutil.which("python3") or "", "/usr/bin/python3"]):
        if not python:
            continue
        ok = subprocess.run([*drop, python, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                             "from scalerl.data.sandbox import SandboxLimits, run_python; "
                             "print(run_python('print(7)', limits=SandboxLimits(namespaces=False)).stdout)", src],
                            capture_output=True, text=True, timeout=60, cwd="/")
        if ok.returncode == 0 and ok.stdout.strip() == "7":
            return drop, python
    pytest.skip(f"no Python that an unprivileged user may run can run {src}'s sandbox")


@pytest.mark.parametrize("layer", ["ns", "fallback"])
def test_an_unprivileged_trainer_is_neither_killed_nor_written_through_its_programs(layer):
    # E2: pidfd_send_signal(pidfd_open(getppid()), SIGKILL) killed a non-root trainer (exit
    # 137); E1: any process of its user; E3: the cwd race wrote to the user's own files
    from test_sandbox_boot import FIND_SIGNALLERS, _signal_attempts

    drop, python = _unprivileged_python()
    script = f"import sys\nsys.path.insert(0, {str(Path(sandbox_ns.__file__).parents[3])!r})\n" + AS_USER_TRAINER
    signals = FIND_SIGNALLERS + _signal_attempts("found", "PIDS")
    r = subprocess.run([*drop, python, "-I", "-c", script, layer], input=signals, capture_output=True,
                       text=True, timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]  # -9 (or 137) was the trainer killed by its program
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if layer == "ns" and out["layer"] != "ns":
        pytest.skip("no user namespace for an unprivileged user here")
    assert out["uid"] != 0 and out["signals"] == "HELD" and out["sibling_alive"]
    assert out["race_finished"] and out["outside"] == []


@pytest.mark.skipif(not sandbox_uids.pool_usable(), reason="the uid pool needs root and its uids mapped here")
def test_a_leased_uid_starts_clear_of_what_a_former_holder_left(monkeypatch):
    # a process a former program left under the uid (out of its group, past the Python
    # layer) would share the next holder's process budget and could signal it: it is killed
    # when the uid is next leased, and nothing else is (nobody's processes, the trainer's)
    uid, fd = sandbox_uids.lease_uid()
    os.close(fd)
    left = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "60"])
    bystander = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
    try:
        for _ in range(2 * sandbox_uids.SIZE):  # walk the pool round to that uid, giving the others back
            lease = sandbox_uids.lease_uid()
            if lease[0] == uid:
                break
            os.close(lease[1])
        else:
            pytest.skip(f"uid {uid} was leased by another trainer meanwhile")
        monkeypatch.setattr(sandbox, "lease_uid", lambda: lease)
        r = run_python("import os\nprint(os.getuid())", limits=FALLBACK)
        assert r.finished and r.stdout.strip() == str(uid)
        assert left.wait(timeout=30) == -9 and bystander.poll() is None
    finally:
        for p in (left, bystander):
            p.kill()
            p.wait()


def test_creations_through_directory_fds_count_against_the_file_cap():
    # a relative O_CREAT open through dir_fd= is judged at the work dir's own path, where a
    # file of that name existed, so it counted nothing: 8 folders x 56 names made 504 files
    # under a 64-file cap. The files on disk are now counted whenever that can happen.
    limits = SandboxLimits(timeout_s=5.0, namespaces=False, disk_mb=64, max_output_bytes=1 << 20)
    _, max_files = disk_caps(64, 1 << 20)
    program = ("import os\ndirs = []\nfor k in range(8):\n    os.mkdir('d%d' % k)\n"
               "    dirs.append(os.open('d%d' % k, os.O_RDONLY))\nnames = []\n"
               "for i in range(200):\n    try:\n        os.close(os.open('n%d' % i, os.O_CREAT | os.O_WRONLY))\n"
               "        names.append('n%d' % i)\n    except OSError:\n        break\n"
               "for fd in dirs:\n    for n in names:\n        try:\n"
               "            os.close(os.open(n, os.O_CREAT | os.O_WRONLY, dir_fd=fd))\n"
               "        except OSError:\n            pass\n"
               "print(sum(len(d) + len(f) for _, d, f in os.walk('.')))\n")
    r = run_python(program, limits=limits)
    assert r.finished, r.stderr
    assert int(r.stdout) <= max_files + 1  # the last check sees the cap, then one is made
