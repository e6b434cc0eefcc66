"""Bootstrap run INSIDE the sandboxed interpreter (passed with ``python -I -S -B -c``).

It holds no secret and decides no verdict. It reads its JSON payload from stdin, moves into
the writable directory, closes the routes to native code and to the file system that raise
no audit event, installs an audit hook (PEP 578), and runs the untrusted program.

- ``mode="io"``: the program's stdout is the output; the exit status says whether it
  finished (0) or raised (1, or its own ``SystemExit`` code).
- ``mode="calls"``: after the program, each call ``[func, args_src, kwargs_src, wrapper]`` is
  made, the assert's wrapper (``list``, ``sorted``, ``len``...) applied to its result here, and
  the result written to the results fd as one line ``index<TAB>json`` in the tagged grammar of
  ``scalerl.data.results``, or ``index<TAB>!`` when it raised or is not plain data (exact or
  subclassed built-in values, Fraction, Decimal; ``_plain_repr``). The trainer compares; this
  process never sees an expected value, so rebinding builtins, a permissive ``__eq__`` or a
  forged line can at best claim a value, never a pass.

The audit hook and the seal (``sandbox/hook.py``, whose text ``sandbox/__init__.py`` ships ahead of
this one) say what the program may touch.

Never import this module in the trainer; ``sandbox/__init__.py`` ships its source text.
"""

# The harness's own references, saved before the program runs: a program may rebind builtins
# or patch modules, and the wrappers and the encoder below must not run its code for theirs.
_WRAPPERS = tuple((f.__name__, f) for f in (set, frozenset, sorted, list, tuple, dict, len, abs,
                                            str, int, float, bool, sum, min, max))
_PLAIN = (__import__("fractions").Fraction, __import__("decimal").Decimal,
          __import__("_json").encode_basestring_ascii, __import__("posix").write)
# the built-in types a value (or its class's base) must be to cross as plain data
_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, set, frozenset, dict)
_TAGS = ((list, "l"), (tuple, "t"), (set, "s"), (frozenset, "f"), (dict, "d"))


def _float_text(v, _repr=float.__repr__):
    """A float's JSON text; the non-finite ones, which JSON lacks, tagged."""
    text = _repr(v)
    return '["F","' + text + '"]' if text in ("inf", "-inf", "nan") else text


def _int_text(v, _bits=int.bit_length, _repr=int.__repr__, _format=int.__format__):
    """An int's wire text: decimal up to 2000 bits (under 640 digits, which no
    ``sys.set_int_max_str_digits`` of the program can refuse), hex-tagged beyond (hex text has
    no digit limit and the trainer reads it in linear time)."""
    if _bits(v) <= 2000:
        return _repr(v)
    return '["x","' + _format(v, "x") + '"]'


def _scalar_text(v, base, _plain=_PLAIN, _float=_float_text, _complex=complex.__complex__,
                 _int=_int_text, _str=str.__str__, _type=type, _bits=int.bit_length):
    """Wire text of a number, string or bytes, read by ``base``'s own methods: for a subclass
    (IntEnum, a str enum) that is the built-in value it holds, and its class's code never runs."""
    if base is int:
        return _int(v)
    if base is float:
        return _float(v)
    if base is complex:
        c = _complex(v)
        return '["c",' + _float(c.real) + "," + _float(c.imag) + "]"
    if base is str:
        return _plain[2](_str(v))
    if base is bytes or base is bytearray:
        return '["b","' + base.hex(v) + '"]'
    fraction, decimal = _plain[0], _plain[1]
    if _type(v) is fraction:  # parts of at most 14000 bits: the trainer reduces by a gcd
        n, d = v.numerator, v.denominator
        if _type(n) is not int or _type(d) is not int or _bits(n) > 14000 or _bits(d) > 14000:
            return None
        return '["q",' + _int(n) + "," + _int(d) + "]"
    return '["D",' + _plain[2](decimal.__str__(v)) + "]"  # exact: str(Decimal) round-trips


def _plain_repr(value, _type=type, _len=len, _issub=issubclass, _plain=_PLAIN, _bases=_BASES,
                _tags=_TAGS, _scalar=_scalar_text, _items=dict.items):
    """The wire JSON of ``value`` (grammar in ``scalerl.data.results``), or None when it is not
    plain data.

    Exact built-in types go as they are. An instance of a subclass of one (a namedtuple, an
    IntEnum, a Counter, OrderedDict or defaultdict) goes as the built-in value it holds, read
    with the built-in type's own methods: its class's code never runs, so a lying ``__eq__`` or
    ``__repr__`` has nothing to lie to, and the value is one the program could have returned
    itself. Fraction and Decimal go exactly; anything else (a plain Enum, an object) is None.
    Iterative, with caps on values and depth, so a deep or huge value fails the call."""
    out, stack, seen = [], [(value, 0)], 0
    while stack:
        v, depth = stack.pop()
        if depth < 0:  # a bracket or comma queued below
            out.append(v)
            continue
        t, seen = _type(v), seen + 1
        if seen > 1_000_000 or depth > 100:
            return None
        if v is None or t is bool:
            out.append("null" if v is None else "true" if v else "false")
            continue
        base = t if t in _bases else None
        for b in _bases if base is None else ():
            if _issub(t, b):
                base = b
                break
        tag = None
        for b, name in _tags:
            if base is b:
                tag = name
        if tag is None:
            text = _scalar(v, base) if base is not None or t is _plain[0] or t is _plain[1] else None
            if text is None:
                return None
            out.append(text)
            continue
        items = [x for kv in _items(v) for x in kv] if base is dict else base.__iter__(v)
        seq = [('["' + tag + '"', -1)]
        for x in items:
            seq.append((",", -1))
            seq.append((x, depth + 1))
        seq.append(("]", -1))
        stack.extend(seq[::-1])
    text = "".join(out)
    return text if _len(text) < 1 << 20 else None


def _run_calls(namespace, calls, fd, os, literal_eval, _encode=_plain_repr, _wrappers=_WRAPPERS,
               _write=_PLAIN[3], _enumerate=enumerate, _len=len, _getattr=getattr, _str=str,
               _type=type, _print=print):
    """Make each call ``[func, args_src, kwargs_src(, wrapper)]``, apply the wrapper here, to
    the real result (so ``list(gen())`` sees the generator), and write one line per call."""
    for i, call in _enumerate(calls):
        text = None
        try:
            func, args_src, kwargs_src = call[0], call[1], call[2]
            wrap = call[3] if _len(call) > 3 else None
            target = namespace[func.split(".")[0]]
            for attr in func.split(".")[1:]:
                target = _getattr(target, attr)
            value = target(*literal_eval(args_src), **literal_eval(kwargs_src))
            if wrap is not None:
                value = [f for name, f in _wrappers if name == wrap][0](value)
            text = _encode(value)
        except BaseException as e:  # noqa: BLE001 - any failure of a call fails that test
            try:  # the message runs the program's __str__, which may itself raise
                _print("test " + _str(i) + ": " + _type(e).__name__ + ": " + _str(e),
                       file=__import__("sys").stderr)
            except BaseException:  # noqa: BLE001
                pass
        _write(fd, (_str(i) + "\t" + ("!" if text is None else text) + "\n").encode())


class _Quitter:
    """``exit`` and ``quit`` as ``site`` defines them (``python -S`` defines neither): calling
    one raises SystemExit with its code."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Use " + self.name + "() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code=None):
        raise SystemExit(code)


_STDIN_NAMES = ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0")


def _stdin_aware(real_open, os):
    """``open`` that reads ``/dev/stdin`` (or ``/dev/fd/0``) as the program's stdin through a
    duplicate of fd 0: the kernel layer has no ``/dev`` and the hook refuses paths outside the
    work directory. Every other call, and any write mode, goes to ``real_open`` unchanged."""

    def open(file, mode="r", *args, **kwargs):
        if type(file) is not int and type(mode) is str and not any(c in mode for c in "wax+"):
            try:
                name = os.fsdecode(os.fspath(file))
            except TypeError:
                name = None
            if name in _STDIN_NAMES:
                file = os.dup(0)
        return real_open(file, mode, *args, **kwargs)

    return open


def _prepare_builtins(os):
    """What ``site`` and the file system give a normal run that this one lacks."""
    import builtins
    import io

    builtins.exit, builtins.quit = _Quitter("exit"), _Quitter("quit")
    builtins.open = io.open = _stdin_aware(io.open, os)


def _shut_down(sys, shutdown, run_exitfuncs, streams):
    """What interpreter shutdown does before the harness's hard exit: wait for the program's
    non-daemon threads (``threading._shutdown``), run its ``atexit`` handlers, and flush
    stdout and stderr, both the current ones and the originals (an atexit handler may write
    to ``sys.__stdout__`` after the program replaced ``sys.stdout``). A thread that never
    ends runs into the time budget, as it would hang plain Python."""
    for step in (shutdown, run_exitfuncs):
        try:
            step()
        except BaseException:  # noqa: BLE001 - the program's own threads and handlers
            pass
    for stream in (sys.stdout, sys.stderr, *streams):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a program may have closed its own stdout
            pass


def _main():
    import ast
    import atexit
    import json
    import os
    import sys
    import threading

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
    _prepare_builtins(os)
    # the harness's references, before the program can rebind them
    ending = (sys, threading._shutdown, atexit._run_exitfuncs, (sys.stdout, sys.stderr))
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
    _shut_down(*ending)
    hard_exit(status & 0xFF)  # daemon threads end here, as in plain Python


if __name__ == "__main__":  # run via ``python -c``; importing this module does nothing
    _main()
