"""Bootstrap run INSIDE the sandboxed interpreter (passed with ``python -I -S -c``).

It is trusted code: it reads its JSON payload from stdin, installs an audit hook
(PEP 578) that blocks the network, new processes, frame introspection and file access
outside the sandbox directory (the standard library stays readable), then runs the
untrusted program. Results go out on fd 1 after a per-run secret nonce, so a program cannot
forge them without finding the nonce, which lives only in this function's locals.

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


def _main():
    import io
    import json
    import os
    import sys

    payload = json.loads(sys.stdin.buffer.read().decode())
    nonce, mode = payload.pop("nonce"), payload["mode"]
    sandbox_dir = os.path.realpath(os.getcwd())
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    cfg = (
        sandbox_dir,
        (sandbox_dir, stdlib),
        os.getcwd,
        ("socket.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
         "os.system", "os.kill", "os.killpg", "os.setuid", "os.setgid", "subprocess.",
         "_posixsubprocess", "ctypes.", "sys._current_frames", "sys.settrace",
         "sys.setprofile", "gc.get_", "pty.", "webbrowser.", "os.startfile", "urllib.",
         "http.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "telnetlib.", "shutil.chown",
         "os.chroot", "os.mount", "resource.setrlimit", "resource.prlimit", "code.__new__",
         "object.__getattr__", "sys.monitoring", "cpython."),
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
    hook = _hook
    hook.__defaults__ = (cfg, *hook.__defaults__[1:])

    code = compile(payload["source"], "solution.py", "exec")
    tests = [compile(t, f"test_{i}", "exec") for i, t in enumerate(payload.get("tests", []))]
    sys.stdin = io.StringIO(payload.get("stdin", ""))
    del payload
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    sys.addaudithook(hook)
    # The report is built from locals and str methods only: a program can rebind module
    # attributes (json.dumps, os.write, builtins) but not this frame's locals.
    write, flush, hard_exit, stdout_fd, results = os.write, sys.stdout.flush, os._exit, 1, []
    try:
        exec(code, namespace)
        loaded = True
    except SystemExit as e:
        loaded = mode == "io" and e.code in (None, 0)
    except BaseException as e:  # noqa: BLE001 - any failure of the program fails its tests
        loaded = False
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
    if mode == "asserts":
        for t in tests:
            ok = loaded
            if loaded:
                try:
                    exec(t, namespace)
                except BaseException as e:  # noqa: BLE001
                    ok = False
                    print(f"{type(e).__name__}: {e}", file=sys.stderr)
            results.append(ok)
    try:
        flush()
    except BaseException:  # noqa: BLE001 - a program may have closed its own stdout
        pass
    verdict = ("L" if loaded is True else "l") + "".join("1" if r is True else "0" for r in results)
    write(stdout_fd, ("\n" + nonce + verdict + "\n").encode())
    hard_exit(0)  # skip atexit handlers and threads the program may have left


if __name__ == "__main__":  # run via ``python -c``; importing this module does nothing
    _main()
