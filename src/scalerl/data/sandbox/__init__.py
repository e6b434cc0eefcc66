"""Run untrusted Python in separate, locked-down processes and report what they did.

The code task's programs are written by the policy, which is optimised to find any way to a
reward. So the program never shares an interpreter with the verdict, the expected outputs or
any secret: the child only runs the program and reports its stdout, its exit status and, for
function tests, the plain-data results of calls the trainer chose (``scalerl.data.asserts``).
The trainer compares.

Layers, outermost first (``sandbox.ns.isolation()`` says which the machine allows, and the
run log names it):

1. kernel namespaces (``sandbox.ns``): own PID namespace (descendants die with the program),
   mount namespace (a read-only minimal root, a size-capped writable tmpfs, no /proc, no
   project files), network namespace, ``nobody`` or no capabilities, and parent-death
   signals so a killed trainer takes its programs with it;
2. resource limits: address space, CPU seconds, file size (stdout, stderr and results are
   size-capped memfds), open files, processes, no core dumps;
3. ``python -I -S -B`` with a bare environment, and an audit hook (``sandbox/hook.py``) that
   blocks sockets (but unconnectable AF_UNIX ones, for asyncio), new processes, ctypes,
   native code but the standard extensions, crafted bytecode, and file access outside the
   work directory (with the routes no audit event reports, such as ``os.mkfifo``, removed
   before the program runs).

Without namespaces (``sandbox.fallback``), layers 2–3 hold, plus a new process group killed
as a whole, a work folder per run that is swept if its trainer died, a disk cap of file size
times file count, and as root a private network namespace (best effort) and ``nobody``; the
run log's one warning says what stays uncontained. This is defence in depth for reward
computation; for hostile multi-tenant code use gVisor or nsjail.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalerl.data.results import decode_results
from scalerl.data.sandbox.fallback import disk_caps, fallback_python, make_workdir, preexec
from scalerl.data.sandbox.ns import NOBODY, isolation, ns_argv, python_path
from scalerl.data.sandbox.uids import lease_uid

_BOOT = "# scalerl-sandbox\n" + "".join(  # the audit hook, then the harness that installs it
    Path(__file__).with_name(name).read_text() for name in ("hook.py", "boot.py"))
_ENV = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8", "SCALERL_SANDBOX": "1"}


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one completion's runs."""

    timeout_s: float = 5.0
    """Wall-clock budget for all of one completion's runs together (its stdin/stdout cases run
    in parallel inside it; the first to reach it stops the rest). Each run's CPU time is
    capped at the same value."""
    memory_mb: int = 512
    max_output_bytes: int = 1 << 20
    """Cap on stdout, stderr and the results channel; a program that writes more fails."""
    disk_mb: int = 64
    """Size of the program's writable directory: a tmpfs with kernel namespaces; without them,
    a file-size rlimit of ``min(max_output_bytes, disk_mb)`` times a cap on the number of
    new files and folders the program creates (``sandbox.fallback.disk_caps``)."""
    max_processes: int = 64
    parallel: int = 0
    """Runs of one completion at once; 0 means one per CPU core."""
    namespaces: bool = True
    """Use kernel namespaces when the machine allows them (see ``sandbox.ns``)."""
    audit_hook: bool = True
    """The inner Python layer. Off only to test the kernel layer on its own."""


DEFAULT_LIMITS = SandboxLimits()


@dataclass
class SandboxResult:
    """What one sandboxed run did."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    seconds: float
    values: list[tuple[bool, Any]] = field(default_factory=list)
    """Per requested call: (True, the returned plain data, ``scalerl.data.results``) or
    (False, None) if it raised, returned something else, or was never reached."""
    error: str | None = None
    """Why the results channel broke its grammar (then every value is (False, None)): only
    the program can have written that, so the caller counts it (``reward_errors``)."""

    @property
    def finished(self) -> bool:
        """The program ran to its end and exited with status 0."""
        return self.exit_code == 0 and not self.timed_out


def _rlimits(limits: SandboxLimits, fsize: int | None = None) -> dict[int, int]:
    return {resource.RLIMIT_AS: limits.memory_mb << 20, resource.RLIMIT_CPU: int(limits.timeout_s) + 1,
            resource.RLIMIT_FSIZE: fsize or limits.max_output_bytes, resource.RLIMIT_NOFILE: 64,
            resource.RLIMIT_CORE: 0, resource.RLIMIT_NPROC: limits.max_processes}


def _prlimit_argv(limits: SandboxLimits) -> list[str]:
    names = {resource.RLIMIT_AS: "as", resource.RLIMIT_CPU: "cpu", resource.RLIMIT_FSIZE: "fsize",
             resource.RLIMIT_NOFILE: "nofile", resource.RLIMIT_CORE: "core", resource.RLIMIT_NPROC: "nproc"}
    return ["prlimit", *(f"--{names[k]}={v}" for k, v in _rlimits(limits).items()), "--"]


def _memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(f"scalerl-sbx-{name}")
    if data:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_memfd(fd: int, cap: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, cap)


class _Run:
    """One launched sandbox process and the memfds that carry its input and output."""

    def __init__(self, source: str, stdin: str, calls: list | None, limits: SandboxLimits) -> None:
        self.limits, self.n_calls, self.start = limits, len(calls or []), time.monotonic()
        self.fds: dict[str, int] = {}
        self.tmp: str | None = None
        try:
            self._launch(source, stdin, calls, limits)
        except BaseException:  # a failed launch (no fds left, exec failed) must not leak them
            self._release()
            raise

    def _launch(self, source: str, stdin: str, calls: list | None, limits: SandboxLimits) -> None:
        for k in ("out", "err", "res"):
            self.fds[k] = _memfd(k)
        use_ns = limits.namespaces and isolation().namespaces
        self.tmp = None if use_ns else make_workdir()
        workdir = "/work" if use_ns else os.path.join(self.tmp, "work")
        fsize, max_files = (None, None) if use_ns else disk_caps(limits.disk_mb, limits.max_output_bytes)
        payload = json.dumps({"source": source, "stdin": stdin, "workdir": workdir,
                              "calls": calls or [], "result_fd": self.fds["res"],
                              "audit_hook": limits.audit_hook, "max_files": max_files}).encode()
        self.fds["in"] = _memfd("in", payload)
        boot = ["-I", "-S", "-B", "-c", _BOOT]
        # as root, a uid of the program's own (its process budget and signals are its own);
        # the lease's fd is closed with the memfds once the run is reaped, which gives it back
        lease = None if use_ns and isolation().user_namespace else lease_uid()
        uid = NOBODY if lease is None else lease[0]
        if lease is not None:
            self.fds["uid"] = lease[1]
        if use_ns:
            argv = ns_argv(user_namespace=isolation().user_namespace, disk_mb=limits.disk_mb,
                           inner=[*_prlimit_argv(limits), python_path(), *boot], uid=uid)
            setup, cwd = None, "/"
        else:
            root = os.geteuid() == 0
            os.chmod(self.tmp, 0o711)  # the dropped user must traverse it to reach workdir
            os.mkdir(workdir, 0o700)
            if root:
                os.chown(workdir, uid, uid)
            argv, setup, cwd = [fallback_python(), *boot], preexec(_rlimits(limits, fsize), workdir, root, uid), self.tmp
        self.proc = subprocess.Popen(
            argv, stdin=self.fds["in"], stdout=self.fds["out"], stderr=self.fds["err"],
            pass_fds=(self.fds["res"],), cwd=cwd, env=_ENV, start_new_session=True,
            close_fds=True, preexec_fn=setup)

    def done(self) -> bool:
        return self.proc.poll() is not None

    def result(self, timed_out: bool) -> SandboxResult:
        """Kill what is left of the run, reap it, and read its outputs."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # also what the program left in its group
        self.proc.wait()
        cap = self.limits.max_output_bytes
        out, err = (_read_memfd(self.fds[k], cap).decode(errors="replace") for k in ("out", "err"))
        values, error = decode_results(_read_memfd(self.fds["res"], cap), self.n_calls, cap)
        self._release()
        return SandboxResult(stdout=out, stderr=err, exit_code=None if timed_out else self.proc.returncode,
                             timed_out=timed_out, seconds=time.monotonic() - self.start,
                             values=values, error=error)

    def _release(self) -> None:
        """Close the memfds and remove the fallback work directory."""
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = {}
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _run_all(jobs: list[tuple[str, list | None]], source: str, limits: SandboxLimits) -> list[SandboxResult | None]:
    """Run ``(stdin, calls)`` jobs of one program, ``parallel`` at a time, in one budget.

    At the budget's end every running job is killed (``timed_out``) and jobs not yet started
    are skipped (``None``): a completion's tests stop at the first timeout.
    """
    width = limits.parallel or os.cpu_count() or 1
    deadline = time.monotonic() + limits.timeout_s
    pending, running = list(enumerate(jobs)), {}
    results: list[SandboxResult | None] = [None] * len(jobs)
    try:
        while pending or running:
            while pending and len(running) < width:
                i, (stdin, calls) = pending.pop(0)
                running[i] = _Run(source, stdin, calls, limits)
            for i in [i for i, run in running.items() if run.done()]:
                results[i] = running.pop(i).result(timed_out=False)
            if time.monotonic() >= deadline:
                break
            if running:
                time.sleep(0.002)
    finally:  # the budget ran out, or the caller is being interrupted: nothing survives
        for i, run in running.items():
            results[i] = run.result(timed_out=True)
    return results


def run_python(source: str, *, stdin: str = "", calls: list | None = None,
               limits: SandboxLimits = DEFAULT_LIMITS) -> SandboxResult:
    """Run ``source`` once: it reads ``stdin``; then each ``[func, args_src, kwargs_src]`` of
    ``calls`` is made (a fourth item names a ``WRAPPERS`` builtin applied to the result in
    the sandbox) and its plain-data result returned in ``values``."""
    return _run_all([(stdin, calls)], source, limits)[0]


def run_cases(source: str, stdins: list[str], limits: SandboxLimits = DEFAULT_LIMITS) -> list[SandboxResult | None]:
    """Run ``source`` once per stdin, in parallel within one budget (``None``: not reached)."""
    return _run_all([(s, None) for s in stdins], source, limits)
