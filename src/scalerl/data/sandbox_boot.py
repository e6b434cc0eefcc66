"""Bootstrap run INSIDE the sandboxed interpreter (passed with ``python -I -S -B -c``).

It holds no secret and decides no verdict. It reads its JSON payload from stdin, moves into
the writable directory, closes the routes to native code and to the file system that raise
no audit event, installs an audit hook (PEP 578), and runs the untrusted program.

- ``mode="io"``: the program's stdout is the output; the exit status says whether it
  finished (0) or raised (1, or its own ``SystemExit`` code).
- ``mode="calls"``: after the program, each call ``[func, args_src, kwargs_src]`` is made
  and its result written to the results fd as one line ``index<TAB>repr``, or
  ``index<TAB>!`` when it raised or returned anything but plain data (None, bool, int, float,
  str, and lists, tuples, dicts, sets, frozensets of those). The trainer compares; this
  process never sees an expected value, so rebinding builtins, a permissive ``__eq__`` or a
  forged line can at best claim a value, never a pass.

The audit hook and the seal (``sandbox_hook.py``, whose text ``sandbox.py`` ships ahead of
this one) say what the program may touch.

Never import this module in the trainer; ``sandbox.py`` ships its source text.
"""

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
    import json
    import os
    import sys

    payload = json.loads(sys.stdin.buffer.read().decode())
    os.chdir(payload["workdir"])
    # the case's input on fd 0 itself, so sys.stdin.buffer and open(0) read it as usual
    stdin = os.memfd_create("stdin")
    os.write(stdin, payload.get("stdin", "").encode())
    os.lseek(stdin, 0, os.SEEK_SET)
    os.dup2(stdin, 0)
    os.close(stdin)
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
    code = compile(payload["source"], "solution.py", "exec")
    calls, fd, literal_eval = payload.get("calls") or [], payload.get("result_fd"), ast.literal_eval
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if payload.get("audit_hook", True):
        # _seal, _hook and _audit_config: sandbox_hook.py, shipped ahead of this text
        _seal(os, sys)  # noqa: F821
        hook = _hook  # noqa: F821
        cfg = _audit_config(os, sys, os.path.realpath(os.getcwd()), payload.get("max_files"))  # noqa: F821
        hook.__defaults__ = (cfg, *hook.__defaults__[1:])
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
