"""The audit-hook layer run INSIDE the sandboxed interpreter, ahead of ``sandbox/boot.py``.

``sandbox/__init__.py`` ships this file's text followed by ``sandbox/boot.py``'s as one ``python -c``
program; ``sandbox.boot._main`` calls ``_seal``, ``_audit_config`` and installs ``_hook``.
A file of its own because it is one concept (what a program may touch) and the harness that
runs calls and encodes results is another.

What the Python layer enforces (``_seal`` before the program, ``_hook`` while it runs):

- no network, no new processes, no signals to any process (``os.kill`` and co. are audited
  and refused; ``pidfd_open``/``pidfd_send_signal``, which are not, are removed), no
  ctypes, no frame-list or garbage-collector walks, no signal handlers or timers
  (``signal.signal``, ``setitimer``, ``alarm``, ``faulthandler.register`` removed), no
  rlimit changes, no sub-interpreters, no symlinks;
- reads only inside the work directory and the standard library, writes only inside the
  work directory, each path judged as the kernel will resolve it: from the work directory
  fixed at start (the working directory cannot be changed, so no thread can move it under a
  check) and with symlinks followed; no directory outside it may be opened (a directory fd
  would let a relative path land elsewhere), and a relative path may not climb with ``..``;
- native code only from an allow-list of standard extension modules loaded from the
  standard library (never a ``.so`` the program wrote), and unmarshalled code only from a
  genuine standard-library ``.pyc`` (crafted bytecode can corrupt the interpreter's memory);
- ``os.mkfifo``/``os.mknod`` (which raise no audit event) removed, and the builtin-module
  constructor removed so a fresh ``posix`` or ``_posixsubprocess`` cannot be made;
- without kernel namespaces, at most ``max_files`` files and folders created, so that with
  the file-size rlimit the disk use is bounded;
- ``asyncio`` imports and runs with nothing more opened than it needs: ``fcntl`` imports but
  every call of it is refused, a stub stands in for ``_posixsubprocess`` (whose native
  module stays blocked), an extension off the allow-list is an ImportError (the stdlib then
  does without ``ssl``), ``types.coroutine`` may set its flag on a compiled code object, and
  AF_UNIX sockets (its self-pipe) may be made but never bound, connected or addressed.

It is an inner layer: the kernel namespaces around this process (``sandbox/ns.py``) are
what contain a program that gets past it, e.g. through a bug in the interpreter itself.

Never import this module in the trainer; ``sandbox/__init__.py`` ships its source text.
"""

_BLOCKED_EVENTS = (
    "socket.", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "os.kill", "os.killpg", "os.setuid", "os.setgid", "subprocess.", "_posixsubprocess",
    "ctypes.", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_", "pty.",
    "webbrowser.", "os.startfile", "urllib.", "http.", "ftplib.", "smtplib.", "poplib.",
    "imaplib.", "telnetlib.", "shutil.chown", "os.chroot", "os.mount", "resource.setrlimit",
    "resource.prlimit", "code.__new__", "sys.monitoring", "cpython.", "signal.", "os.mkfifo",
    "os.mknod", "os.symlink", "marshal.load", "syslog.", "sqlite3.", "fcntl.")
_BLOCKED_IMPORTS = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "gc", "multiprocessing",
                              "_multiprocessing", "_posixshmem", "sqlite3", "_sqlite3"})
_NATIVE_OK = frozenset({
    # the interpreter's own builtins
    "_abc", "_ast", "_codecs", "_collections", "_functools", "_imp", "_io", "_locale",
    "_operator", "_signal", "_sre", "_stat", "_string", "_symtable", "_thread", "_tokenize",
    "_tracemalloc", "_typing", "_warnings", "_weakref", "atexit", "builtins", "errno",
    "faulthandler", "itertools", "marshal", "posix", "sys", "time",
    # computation, text and data formats (their I/O goes through audited Python code)
    "math", "cmath", "_bisect", "_heapq", "_random", "_struct", "array", "_datetime",
    "_decimal", "_json", "_pickle", "binascii", "zlib", "_bz2", "_lzma", "_hashlib",
    "_blake2", "_md5", "_sha1", "_sha2", "_sha256", "_sha3", "_sha512", "_statistics",
    "unicodedata", "_csv", "_contextvars", "_asyncio", "_queue", "select", "_zoneinfo",
    "_opcode", "_uuid", "_multibytecodec", "_codecs_cn", "_codecs_hk", "_codecs_iso2022",
    "_codecs_jp", "_codecs_kr", "_codecs_tw", "pyexpat", "_elementtree", "_socket", "mmap",
    "resource", "audioop", "_crypt",
    # importable for ``subprocess`` (so ``asyncio``) to load; every call of it is refused
    # ("fcntl." events: F_SETOWN would aim SIGIO at another process)
    "fcntl"})
# events that change the file system: by the positions of their path arguments, and those
# that add a directory entry (counted against ``max_files`` without namespaces). Frozensets,
# not a dict: nothing the hook can reach may be mutable.
_WRITE_ONE = frozenset({"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                        "os.truncate", "os.utime", "shutil.rmtree", "os.removexattr",
                        "os.setxattr", "os.chflags", "os.lchflags", "os.lchmod"})
_WRITE_TWO = frozenset({"os.rename", "os.replace", "os.link", "shutil.move", "shutil.copyfile",
                        "shutil.copymode", "shutil.copystat", "shutil.copytree",
                        "shutil.unpack_archive"})
_CREATES = frozenset({"os.mkdir", "os.link", "os.setxattr"})
_READABLE_ATTRS = frozenset({"f_code", "__code__", "__defaults__", "__kwdefaults__", "gi_code", "cr_code",
                             "ag_code", "gi_frame", "cr_frame", "ag_frame", "tb_frame"})
_READ_EVENTS = frozenset({"os.listdir", "os.scandir", "glob.glob", "glob.glob/2", "os.getxattr",
                          "os.listxattr", "os.walk", "os.fwalk"})


def _normalize(path, cwd, _type=type, _str=str, _bytes=bytes):
    """Absolute, ``.``/``..``-resolved path by string operations only (no patchable helpers);
    None for a non-string, and for a relative path with a ``..`` part: with a directory fd
    (``dir_fd=``, which no audit event reports) the kernel would resolve it from another
    directory than the one this check assumes, and climb out of it."""
    if _type(path) is _bytes:
        path = path.decode("utf-8", "surrogateescape")
    if _type(path) is not _str:
        return None
    if not path.startswith("/"):
        if ".." in path.split("/"):
            return None
        path = cwd + "/" + path
    parts = ()  # a tuple: a program's code run by the garbage collector cannot edit it
    for part in path.split("/"):
        if part == "..":
            parts = parts[:-1]
        elif part not in ("", "."):
            parts = (*parts, part)
    return "/" + "/".join(parts)


def _resolve(path, cfg, _norm=_normalize, _type=type, _str=str, _bytes=bytes, _len=len,
             _tuple=tuple, _oserror=OSError):
    """``path`` as the kernel will find it: absolute, from the work directory fixed at start
    (never ``getcwd()`` at check time, which another thread may have moved), with every
    symlink replaced by its target, so that a link inside the read roots pointing elsewhere is
    judged by where it leads; None where :func:`_normalize` refuses, or past 40 links.
    Only the fixed directory, ``lstat`` and ``readlink`` bound at start are used."""
    cwd, lstat, readlink = cfg[0], cfg[3], cfg[16]
    if _norm(path, cwd) is None:
        return None
    if _type(path) is _bytes:
        path = path.decode("utf-8", "surrogateescape")
    todo = _tuple(path.split("/")) if path.startswith("/") else _tuple((cwd + "/" + path).split("/"))
    base, links, missing = "", 0, False
    while todo:
        part, todo = todo[0], todo[1:]
        if part in ("", "."):
            continue
        if part == "..":  # ``base`` holds no symlink, so its parent is the string's parent
            base = base[:base.rfind("/")]
            continue
        step = base + "/" + part
        if not missing:
            try:
                is_link = lstat(step).st_mode & 0o170000 == 0o120000
            except _oserror:  # absent (or unreadable): the rest is taken as written
                is_link, missing = False, True
            if is_link:
                links += 1
                target = readlink(step)
                if links > 40 or _type(target) is not _str:
                    return None
                if target.startswith("/"):
                    base = ""
                todo = _tuple(target.split("/")) + todo
                continue
        base = step
    return base or "/"


def _within(path, roots, cfg, _resolve=_resolve, _type=type, _int=int, _any=any):
    """``path`` (a string, or an open fd, which only ever names what was checked when opened)
    lies in one of ``roots`` once resolved (:func:`_resolve`)."""
    if _type(path) is _int:
        return True
    real = _resolve(path, cfg)
    return real is not None and _any(real == r or real.startswith(r + "/") for r in roots)


def _genuine_bytecode(cfg, _type=type, _str=str, _bytes=bytes, _mv=memoryview, _len=len,
                      _within=_within, _keyerror=KeyError):
    """True when the ``marshal.loads`` being audited is the import system reading a real
    standard-library ``.pyc``: the caller is ``_compile_bytecode`` itself (code objects cannot
    be forged), its buffer is immutable, and it equals that file's body. Anything else could be
    crafted bytecode that corrupts the interpreter's memory."""
    sandbox_dir, stdlib, getframe, read_file, pyc_code = cfg[0], cfg[2], cfg[5], cfg[6], cfg[7]
    frame = getframe(2)  # 0: this function, 1: the hook, 2: marshal.loads's Python caller
    if frame.f_code is not pyc_code:
        return False
    try:  # read straight from the frame, never through a dict a program could edit
        data = frame.f_locals["data"]
        path = frame.f_locals["bytecode_path"]
    except _keyerror:
        return False
    immutable = _type(data) is _bytes or (_type(data) is _mv and _type(data.obj) is _bytes
                                          and data.c_contiguous and data.format == "B")
    if not immutable or _type(path) is not _str or not path.endswith(".pyc"):
        return False
    if not _within(path, stdlib, cfg) or _within(path, (sandbox_dir,), cfg):
        return False
    body = read_file(path)
    return _len(body) > 16 and data == body[16:]


def _check_import(cfg, args, _type=type, _str=str, _any=any, _perm=PermissionError,
                  _missing=ImportError, _within=_within, _tuple=tuple):
    """Blocked modules by any part of their dotted name; native code only from the allow-list,
    loaded from the standard library, and builtins only if pre-made by ``_seal``.

    A standard extension off the allow-list (``_ssl``, ``pwd``) raises ImportError, as if it
    were not installed, so the standard library's own fallbacks run (``asyncio`` imports
    without ``ssl``); blocked modules and native code from anywhere else stay PermissionError."""
    sandbox_dir, stdlib, blocked, native_ok, builtin_names = cfg[0], cfg[2], cfg[9], cfg[10], cfg[11]
    name, filename = args[0], args[1]
    if _type(name) is not _str:
        raise _perm("sandbox: importing a non-string module name is not allowed")
    parts = _tuple(name.split("."))
    if _any(p in blocked for p in parts):
        raise _perm("sandbox: importing " + name + " is not allowed")
    if name in builtin_names and name not in native_ok:
        raise _missing("sandbox: the native module " + name + " is not available")
    if filename is None:
        return
    if (_type(filename) is not _str or not _within(filename, stdlib, cfg)
            or _within(filename, (sandbox_dir,), cfg)):
        raise _perm("sandbox: loading native code for " + name + " is not allowed")
    if parts[-1] not in native_ok:
        raise _missing("sandbox: the native module " + name + " is not available")


def _shown(path, _type=type, _repr=repr, _str=str, _bytes=bytes):
    """``repr`` of a string path for a message; a program's own object is never called."""
    return _repr(path) if _type(path) in (_str, _bytes) else "that path"


def _count_creation(cfg, _next=next, _str=str, _perm=PermissionError):
    """Without namespaces there is no size-capped tmpfs: cap the number of created entries,
    so that with RLIMIT_FSIZE the total disk use is bounded (``max_files`` x file size)."""
    counter, max_files = cfg[12], cfg[13]
    if counter is not None and _next(counter) > max_files:
        raise _perm("sandbox: more than " + _str(max_files) + " files written")


def _tree_within_cap(cfg, _oserror=OSError):
    """The work directory holds at most ``max_files`` entries, counted on disk. Needed where
    the counter cannot see a creation: a relative ``O_CREAT`` open through a directory fd
    (``dir_fd=``, which no audit event reports) is judged at the work directory's own path,
    where a file of that name may already exist, while the kernel makes a new one in the
    other directory (k folders x n names made k x n files for k + n counts)."""
    sandbox_dir, max_files, scandir = cfg[0], cfg[13], cfg[17]
    todo, seen = (sandbox_dir,), 0
    while todo:
        folder, todo = todo[0], todo[1:]
        try:
            with scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if seen > max_files:
                        return False
                    if entry.is_dir(follow_symlinks=False):
                        todo = (*todo, entry.path)
        except _oserror:
            continue
    return True


def _check_open(cfg, args, _type=type, _str=str, _int=int, _any=any, _perm=PermissionError,
                _resolve=_resolve, _count=_count_creation, _name=_shown, _oserror=OSError,
                _tree_ok=_tree_within_cap):
    sandbox_dir, read_roots, stat, write_flags, creates = cfg[0], cfg[1], cfg[4], cfg[8], cfg[18]
    path, mode, flags = args
    if path is None or _type(path) is _int:  # an fd only ever names what was checked when opened
        return
    writing = (_type(mode) is _str and _any(c in mode for c in "wax+")) or (
        _type(flags) is _int and flags & write_flags)
    real = _resolve(path, cfg)  # resolved once: the checks below all judge this one path
    roots = (sandbox_dir,) if writing else read_roots
    if real is None or not _any(real == r or real.startswith(r + "/") for r in roots):
        raise _perm("sandbox: cannot open " + _name(path))
    if writing:  # only a new entry counts: appends and rewrites do not
        try:
            stat(real)
        except _oserror:
            _count(cfg)
            return
        if cfg[12] is not None and _type(flags) is _int and flags & creates and not _tree_ok(cfg):
            raise _perm("sandbox: more than " + _str(cfg[13]) + " files written")
    elif not (real == sandbox_dir or real.startswith(sandbox_dir + "/")):
        try:
            is_dir = stat(real).st_mode & 0o170000 == 0o040000
        except _oserror:
            is_dir = False
        if is_dir:
            raise _perm("sandbox: cannot open a directory outside the work directory")


def _hook(event, args, _cfg=None, _type=type, _str=str, _int=int, _perm=PermissionError, _any=any,
          _within=_within, _resolve=_resolve, _bytecode=_genuine_bytecode, _import=_check_import,
          _open=_check_open, _count=_count_creation, _name=_shown, _blocked=_BLOCKED_EVENTS,
          _reads=_READ_EVENTS, _one=_WRITE_ONE, _two=_WRITE_TWO, _creates=_CREATES,
          _readable=_READABLE_ATTRS):
    """Audit hook. Everything it uses, helpers and builtins included, is bound as a default,
    never looked up in the (program-writable) globals or builtins; reassigning ``__defaults__``
    / ``__code__`` is itself an audited, blocked event; and nothing it holds is mutable but a
    counter that only goes up."""
    cfg = _cfg
    sandbox_dir, read_roots = cfg[0], cfg[1]
    frozen_attrs, protected = cfg[14], cfg[15]
    if event == "marshal.loads":
        if not _bytecode(cfg):
            raise _perm("sandbox: unmarshalling code is not allowed")
        return
    if event == "code.__new__" and cfg[5](1).f_code is cfg[19]:
        return  # types.coroutine's flag change (asyncio needs it): the same, compiled bytecode
    if event == "socket.__new__" and args[1] == 1:
        # AF_UNIX, for asyncio's self-pipe (socketpair): bind, connect, sendto and sendmsg
        # stay refused, so such a socket reaches nothing but its own pair
        return
    if event.startswith(_blocked):
        raise _perm("sandbox: " + event + " is not allowed")
    if event == "object.__getattr__":
        # reads of code objects, defaults and traceback frames (what @dataclass, inspect,
        # traceback and asyncio need): nothing secret lives in this interpreter, frames are
        # reachable through sys._getframe anyway, and every write to these stays blocked
        if not (_type(args[1]) is _str and args[1] in _readable):
            raise _perm("sandbox: object.__getattr__ is not allowed")
    elif event == "object.__setattr__":
        if _any(args[0] is p for p in protected) and (
                _type(args[1]) is not _str or args[1] in frozen_attrs):
            raise _perm("sandbox: setting that attribute is not allowed")
    elif event == "import":
        _import(cfg, args)
    elif event == "open":
        _open(cfg, args)
    elif event == "os.chdir":
        # the working directory stays the work directory: paths are judged from it, and a
        # thread moving it elsewhere and back would make the kernel resolve a relative path
        # from another directory than the one checked (also ``os.fchdir``, whose fd is unknown)
        if _type(args[0]) is _int or _resolve(args[0], cfg) != sandbox_dir:
            raise _perm("sandbox: changing the working directory is not allowed")
    elif event in _reads:
        path = args[0] if args and args[0] is not None else "."
        if not _within(path, read_roots, cfg):
            raise _perm("sandbox: cannot access " + _name(path))
    elif event in _one or event in _two:
        for path in args[:2 if event in _two else 1]:
            if not _within(path, (sandbox_dir,), cfg):
                raise _perm("sandbox: cannot modify " + _name(path))
        if event in _creates:
            _count(cfg)


def _audit_config(os, sys, sandbox_dir, max_files):
    """The hook's configuration: one immutable tuple (indexed by the functions above)."""
    import _io
    import itertools
    import types
    from importlib import _bootstrap_external

    stdlib = os.path.realpath(os.path.dirname(os.__file__))

    def read_file(path, _open=_io.FileIO):
        with _open(path, "rb") as f:
            return f.readall()

    return (
        sandbox_dir,                                    # 0
        (sandbox_dir, stdlib),                          # 1 read roots
        (stdlib,),                                      # 2 native code and bytecode
        os.lstat,                                       # 3 (a builtin, bound before the program)
        os.stat,                                        # 4
        sys._getframe,                                  # 5
        read_file,                                      # 6
        _bootstrap_external._compile_bytecode.__code__,  # 7
        os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,  # 8
        _BLOCKED_IMPORTS,                               # 9
        _NATIVE_OK,                                     # 10
        frozenset(sys.builtin_module_names),            # 11
        itertools.count(1) if max_files else None,      # 12
        max_files,                                      # 13
        frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__"}),
        (_hook, _normalize, _resolve, _within, _genuine_bytecode, _check_import,
         _count_creation, _tree_within_cap, _check_open, _shown, read_file),  # 15
        os.readlink,                                    # 16
        os.scandir,                                     # 17
        os.O_CREAT,                                     # 18
        types.coroutine.__code__,                       # 19 (it only adds a flag to a code)
    )


# What ``_seal`` removes, by module: routes that raise no audit event. Node makers (a fifo or
# device outside the work dir), pidfds (a kill of any process the user may signal, which
# ``os.kill``'s audited event would have refused), and signal handlers and timers (a program
# that catches the harness's signals, or arms one for later).
_REMOVED = (("posix", ("mkfifo", "mknod", "pidfd_open")),
            ("_signal", ("signal", "setitimer", "alarm", "set_wakeup_fd", "siginterrupt",
                         "pidfd_send_signal")),
            ("signal", ("signal",)),  # the Python wrapper around _signal.signal
            ("faulthandler", ("register", "enable")))


def _no_processes(*args, **kwargs):
    raise PermissionError("sandbox: new processes are not allowed")


def _seal(os, sys):
    """Close, before the program runs, what no audit event reports: the functions of
    ``_REMOVED`` are removed wherever they are referenced, the allowed builtin modules are
    made now and the builtin-module constructor is removed (so ``_imp.create_builtin`` cannot
    give a fresh ``posix``, ``_signal`` or ``_posixsubprocess``)."""
    import _imp
    import _signal
    import signal  # noqa: F401 - made now, so that its wrapper exists to be removed
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in sys.builtin_module_names:
            if name in _NATIVE_OK and name not in sys.modules:
                __import__(name)
    del _imp.create_builtin
    # ``subprocess`` imports ``fork_exec`` at load (``asyncio`` imports ``subprocess``): a stub
    # that refuses stands in for the native module, which stays blocked from import
    stub = type(sys)("_posixsubprocess")
    stub.fork_exec = _no_processes
    sys.modules["_posixsubprocess"] = stub
    # SIGINT back to its default action: then asyncio.run, which installs its own SIGINT
    # handler only over Python's default one, needs no signal.signal
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    gone = [getattr(sys.modules[m], n) for m, names in _REMOVED for n in names
            if m in sys.modules and hasattr(sys.modules[m], n)]
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if isinstance(space, dict):
            for key in [k for k, v in space.items() if any(v is g for g in gone)]:
                del space[key]
    for module, names in _REMOVED:
        if isinstance(getattr(sys.modules.get(module), "__all__", None), list):
            sys.modules[module].__all__ = [n for n in sys.modules[module].__all__ if n not in names]
    os.__all__ = [n for n in os.__all__ if n not in _REMOVED[0][1]]
    for name in ("supports_dir_fd", "supports_fd", "supports_follow_symlinks", "supports_effective_ids"):
        for g in gone:
            getattr(os, name, set()).discard(g)
