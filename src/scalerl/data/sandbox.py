"""Run untrusted Python in a separate, locked-down process and report what it did.

The code task's programs are written by the policy, so they never run in the trainer's
process. Each run gets, in layers (any one may be unavailable; the others still hold):

1. a fresh temporary directory as its working directory, removed afterwards;
2. ``python -I -S -B`` (no user site, no site-packages, no environment, no bytecode);
3. a new session / process group, killed as a whole (``os.killpg``) on timeout and after exit;
4. resource limits: address space (memory), CPU seconds, number of processes, file size
   (stdout/stderr go to size-capped files), open files, no core dumps;
5. when the trainer runs as root: a private network namespace (``unshare(CLONE_NEWNET)``,
   only a downed loopback) and privileges dropped to ``nobody`` (uid/gid 65534);
6. an audit hook in the child (``sandbox_boot.py``) that blocks sockets, fork/exec/spawn,
   frame introspection, ctypes, and any file access outside its directory except reads of
   the standard library.

This is defence in depth for reward computation, not a hardened container (use gVisor or
nsjail for hostile multi-tenant code).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

NOBODY = 65534
CLONE_NEWNET = 0x40000000
_BOOT = (Path(__file__).with_name("sandbox_boot.py")).read_text()
# Loaded once in the parent: the pre-exec hook must not import (the import lock may be held
# by another thread at fork time).
_LIBC = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. ``timeout_s`` is wall-clock; CPU time is capped at the same value."""

    timeout_s: float = 5.0
    memory_mb: int = 512
    max_output_bytes: int = 1 << 20
    """Cap on stdout (and stderr) file size; a program that writes more fails its run."""
    max_processes: int = 64
    drop_privileges: bool = True
    """Run as nobody (only possible, and only needed, when the trainer is root)."""
    isolate_network: bool = True
    """Private network namespace (root only); the audit hook blocks sockets regardless."""


DEFAULT_LIMITS = SandboxLimits()


@dataclass
class SandboxResult:
    """What one sandboxed run did."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    seconds: float
    results: list[bool] = field(default_factory=list)
    """Per-test outcomes reported by the trusted bootstrap (assert mode)."""
    loaded: bool = False
    """The bootstrap's verdict that the program itself ran to the end without error."""
    reported: bool = False
    """The bootstrap's nonce-signed report was found (False: killed, crashed or timed out)."""


def _world_executable(path: str) -> bool:
    p = Path(path).resolve()
    for part in [p, *p.parents]:
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH:
            return False
    return bool(p.stat().st_mode & stat.S_IROTH)


def sandbox_python() -> str:
    """An interpreter the dropped user can execute: ours if world-accessible, else the system's."""
    candidates = [os.path.realpath(sys.executable), shutil.which("python3") or "",
                  "/usr/bin/python3", "/usr/local/bin/python3"]
    if os.geteuid() != 0:
        return candidates[0]
    for c in candidates:
        if c and os.path.exists(c) and _world_executable(c):
            return c
    return candidates[0]


def _preexec(limits: SandboxLimits, workdir: str, drop: bool, isolate: bool):
    mem = limits.memory_mb * 1024 * 1024
    cpu = int(limits.timeout_s) + 1

    def setup() -> None:  # runs in the child between fork and exec: no imports, no allocation
        if isolate:
            _LIBC.unshare(CLONE_NEWNET)  # best effort; the audit hook still blocks sockets
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_output_bytes,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes,) * 2)
        if drop:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        os.chdir(workdir)

    return setup


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _parse_report(stdout: str, nonce: str) -> tuple[str, dict | None]:
    """Split the program's stdout from the bootstrap's ``\n<nonce>L1011`` verdict line."""
    head, sep, tail = stdout.rpartition("\n" + nonce)
    verdict = tail.strip()
    if not sep or not verdict or verdict[0] not in "Ll" or set(verdict[1:]) - {"0", "1"}:
        return stdout, None
    return head, {"loaded": verdict[0] == "L", "results": [c == "1" for c in verdict[1:]]}


def run_python(
    source: str,
    *,
    stdin: str = "",
    tests: list[str] | None = None,
    mode: Literal["io", "asserts"] = "io",
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> SandboxResult:
    """Run ``source`` in the sandbox.

    ``mode="io"``: the program reads ``stdin`` and its stdout is returned.
    ``mode="asserts"``: the program is executed, then each snippet in ``tests`` runs in its
    namespace; ``results[i]`` says whether snippet i raised nothing.
    """
    root = os.geteuid() == 0
    drop, isolate = limits.drop_privileges and root, limits.isolate_network and root
    nonce = secrets.token_hex(16)
    payload = json.dumps({"nonce": nonce, "mode": mode, "source": source,
                          "tests": tests or [], "stdin": stdin})
    with tempfile.TemporaryDirectory(prefix="scalerl-sbx-") as base:
        workdir = os.path.join(base, "work")
        os.chmod(base, 0o711)  # the dropped user must traverse base to reach workdir
        os.mkdir(workdir, 0o700)
        if drop:
            os.chown(workdir, NOBODY, NOBODY)
        out_path, err_path = os.path.join(base, "stdout"), os.path.join(base, "stderr")
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sandbox_python(), "-I", "-S", "-B", "-c", _BOOT],
                stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=base,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                start_new_session=True, close_fds=True,
                preexec_fn=_preexec(limits, workdir, drop, isolate),
            )
            timed_out = False
            try:
                proc.communicate(payload.encode(), timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)  # also reaps anything the program left behind
                proc.wait()
        seconds = time.monotonic() - start
        stdout = Path(out_path).read_bytes()[: limits.max_output_bytes].decode(errors="replace")
        stderr = Path(err_path).read_bytes()[: limits.max_output_bytes].decode(errors="replace")
    stdout, report = _parse_report(stdout, nonce)
    return SandboxResult(
        stdout=stdout, stderr=stderr, exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out, seconds=seconds,
        results=[bool(r) for r in report["results"]] if report else [],
        loaded=bool(report and report["loaded"]), reported=report is not None,
    )
