"""Bootstrap run INSIDE the sandboxed interpreter (passed with ``python -I -S -B -c``).

It holds no secret and decides no verdict. It reads its JSON payload from stdin, moves into
the writable directory, installs an audit hook (PEP 578) that blocks the network, new
processes, frame and garbage-collector introspection and file access outside that directory
(the standard library stays readable), and runs the untrusted program.

- ``mode="io"``: the program's stdout is the output; the exit status says whether it
  finished (0) or raised (1, or its own ``SystemExit`` code).
- ``mode="calls"``: after the program, each call ``[func, args_src, kwargs_src]`` is made
  and its result written to the results fd as one line ``index<TAB>repr``, or
  ``index<TAB>!`` when it raised or returned anything but plain data (None, bool, int, float,
  str, and lists, tuples, dicts, sets, frozensets of those). The trainer compares; this
  process never sees an expected value, so rebinding builtins, a permissive ``__eq__`` or a
  forged line can at best claim a value, never a pass.

The audit hook is an inner layer: the kernel namespaces around this process
(``sandbox_ns.py``) are what contain a program that gets past it.

Never import this module in the trainer; ``sandbox.py`` ships its source text.
"""


def _normalize(path, cwd, _type=type, _str=str, _bytes=bytes):
    """Absolute, ``.``/``..``-resolved path by string operations only (no patchable helpers)."""
    if _type(path) is _bytes:
        path = path.decode("utf-8", "surrogateescape")
    if _type(path) is not _str:
        return None
    if not path.startswith("/"):
        path = cwd + "/" + path
    parts = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


def _hook(event, args, _cfg=None, _norm=_normalize, _type=type, _int=int, _str=str,
          _bytes=bytes, _perm=PermissionError, _any=any):
    """Audit hook. Everything it uses is bound as a default so a program cannot patch it
    (reassigning ``__defaults__`` / ``__code__`` is itself an audited, blocked event)."""
    (sandbox_dir, read_roots, getcwd, blocked_prefixes, blocked_imports, path_events,
     write_events, write_flags, frozen_attrs, protected) = _cfg

    def inside(path, roots):
        if _type(path) is _int:
            return True
        real = _norm(path, getcwd())
        return real is not None and _any(real == r or real.startswith(r + "/") for r in roots)

    if event.startswith(blocked_prefixes):
        raise _perm("sandbox: " + event + " is not allowed")
    if (event == "object.__setattr__" and args[1] in frozen_attrs
            and _any(args[0] is p for p in protected)):
        raise _perm("sandbox: setting " + _str(args[1]) + " is not allowed")
    if event == "import" and args[0].split(".")[0] in blocked_imports:
        raise _perm("sandbox: importing " + _str(args[0]) + " is not allowed")
    if event == "open":
        path, mode, flags = args
        writing = (_type(mode) is _str and _any(c in mode for c in "wax+")) or (
            _type(flags) is _int and flags & write_flags)
        if path is not None and not inside(path, (sandbox_dir,) if writing else read_roots):
            raise _perm("sandbox: cannot open " + repr(path))
    elif event in path_events and args and not inside(args[0], read_roots):
        raise _perm("sandbox: cannot access " + repr(args[0]))
    elif event in write_events:
        for a in args[:2]:
            if _type(a) in (_str, _bytes) and not inside(a, (sandbox_dir,)):
                raise _perm("sandbox: cannot modify " + repr(a))


def _audit_config(os, sandbox_dir):
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    return (
        sandbox_dir,
        (sandbox_dir, stdlib),
        os.getcwd,
        ("socket.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
         "os.system", "os.kill", "os.killpg", "os.setuid", "os.setgid", "subprocess.",
         "_posixsubprocess", "ctypes.", "sys._current_frames", "sys.settrace",
         "sys.setprofile", "gc.get_", "pty.", "webbrowser.", "os.startfile", "urllib.",
         "http.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "telnetlib.", "shutil.chown",
         "os.chroot", "os.mount", "resource.setrlimit", "resource.prlimit", "code.__new__",
         "object.__getattr__", "sys.monitoring", "cpython.", "signal.", "os.mkfifo", "os.mknod"),
        frozenset({"ctypes", "_ctypes", "_posixsubprocess", "gc", "multiprocessing"}),
        frozenset({"os.listdir", "os.scandir", "glob.glob", "os.chdir"}),
        frozenset({"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.replace", "os.chmod",
                   "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime",
                   "shutil.rmtree", "shutil.move", "shutil.copyfile", "os.removexattr",
                   "os.setxattr"}),
        os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
        frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__"}),
        (_hook, _normalize),
    )


_PLAIN = (type(None), bool, int, float, str)


def _plain_repr(value, _type=type, _repr=repr, _len=len, _plain=_PLAIN):
    """``repr(value)`` if it is plain data (exact built-in types, finite floats), else None."""
    stack, seen = [(value, 0)], 0
    while stack:
        v, depth = stack.pop()
        t, seen = _type(v), seen + 1
        if seen > 1_000_000 or depth > 100:
            return None
        if t is float and (v != v or v in (float("inf"), float("-inf"))):
            return None
        if t in _plain:
            continue
        if t in (list, tuple, set, frozenset):
            stack.extend((x, depth + 1) for x in v)
        elif t is dict:
            stack.extend((x, depth + 1) for kv in v.items() for x in kv)
        else:
            return None
    text = _repr(value)  # the trainer reads frozenset({...}) back as a set
    return text if _len(text) < 1 << 20 else None


def _run_calls(namespace, calls, fd, os, literal_eval):
    for i, (func, args_src, kwargs_src) in enumerate(calls):
        try:
            target = namespace[func.split(".")[0]]
            for attr in func.split(".")[1:]:
                target = getattr(target, attr)
            text = _plain_repr(target(*literal_eval(args_src), **literal_eval(kwargs_src)))
        except BaseException as e:  # noqa: BLE001 - any failure of a call fails that test
            text = None
            print(f"test {i}: {type(e).__name__}: {e}", file=__import__("sys").stderr)
        os.write(fd, f"{i}\t{'!' if text is None else text}\n".encode())


def _main():
    import ast
    import io
    import json
    import os
    import sys

    payload = json.loads(sys.stdin.buffer.read().decode())
    os.chdir(payload["workdir"])
    sys.stdin = io.StringIO(payload.get("stdin", ""))
    code = compile(payload["source"], "solution.py", "exec")
    calls, fd, literal_eval = payload.get("calls") or [], payload.get("result_fd"), ast.literal_eval
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if payload.get("audit_hook", True):
        hook = _hook
        hook.__defaults__ = (_audit_config(os, os.path.realpath(os.getcwd())), *hook.__defaults__[1:])
        sys.addaudithook(hook)
    del payload
    status, hard_exit = 0, os._exit
    try:
        exec(code, namespace)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # noqa: BLE001 - any failure of the program fails its tests
        status = 1
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
    if calls and status == 0:
        _run_calls(namespace, calls, fd, os, literal_eval)
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001 - a program may have closed its own stdout
        pass
    hard_exit(status & 0xFF)  # skip atexit handlers and threads the program may have left


if __name__ == "__main__":  # run via ``python -c``; importing this module does nothing
    _main()
