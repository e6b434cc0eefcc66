"""The one plug-in loader: ``FILE.py:NAME`` and ``package.module:NAME`` resolve here.

A user's own task factory, reward function or environment is named in the config by a
string, never passed as an object: a spawned generator or a Ray actor rebuilds everything
from the config, so each process that needs the object loads it itself from the same
string. :func:`canonical` makes that string mean the same file in every process (an
absolute path, whatever the worker's cwd); :func:`load` imports it and returns the object.

Every failure is one sentence (:class:`PluginError`) naming the spec and what is wrong:
the file does not exist, it does not load (with the exception's own one-line reason), or
the name is not in it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class PluginError(ValueError):
    """A plug-in spec that cannot be resolved, in one sentence."""


def is_spec(text: str) -> bool:
    """Whether ``text`` names a plug-in (``FILE.py:NAME`` or ``package.module:NAME``) rather
    than a built-in by plain name."""
    head, sep, name = text.rpartition(":")
    return bool(sep and head and name) and (head.endswith(".py") or bool(_MODULE.match(head)))


def _split(spec: str, what: str) -> tuple[str, str]:
    head, sep, name = spec.rpartition(":")
    if not (sep and head and _NAME.match(name)):
        raise PluginError(f"{what} {spec!r} is not of the form FILE.py:NAME or package.module:NAME")
    if not head.endswith(".py") and not _MODULE.match(head):
        raise PluginError(f"{what} {spec!r}: {head!r} is neither a .py file nor a dotted module name")
    return head, name


def canonical(spec: str, what: str = "plug-in", base: str | Path | None = None) -> str:
    """``spec`` with a file part made absolute (relative to ``base``, else the cwd), so that
    every process resolves the same file; a module spec is returned unchanged."""
    head, name = _split(spec, what)
    if not head.endswith(".py"):
        return spec
    path = Path(head).expanduser()
    if not path.is_absolute():
        path = Path(base or Path.cwd()) / path
    return f"{path.resolve()}:{name}"


def _load_file(path: Path, spec: str, what: str):
    if not path.is_file():
        raise PluginError(f"{what} {spec!r}: the file {path} does not exist")
    # one module per file, named after its path, so two plug-in files called the same don't
    # clash and a second load in the same process reuses the first
    key = "scalerl_plugin_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if key in sys.modules:
        return sys.modules[key]
    module_spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[key] = module
    try:
        with import_limit(spec, what):
            module_spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - the user's file: any failure is one sentence
        del sys.modules[key]
        if isinstance(e, KeyboardInterrupt):
            raise
        raise PluginError(f"{what} {spec!r}: {path} does not load ({type(e).__name__}: "
                          f"{_first_line(e)})") from None
    return module


IMPORT_LIMIT_S = 120.0
"""Seconds a plug-in's import may take before the process stops with one sentence: far above
what loading torch, transformers or vLLM costs on a loaded machine, a bound and not a knob."""


@contextmanager
def import_limit(spec: str, what: str, limit_s: float | None = None) -> Iterator[None]:
    """Stop this process (exit 2, one sentence) if the block, a plug-in's import, outlasts
    ``limit_s`` (:data:`IMPORT_LIMIT_S`).

    A module whose import never returns (it waits on a socket, a lock, an input) hung config
    loading with no output (reliability probe 3, R20). The import runs on this thread, as any
    import does (a module may set signal handlers, which only the main thread can), and a
    watchdog thread ends the process when the limit passes: an import cannot be abandoned, since
    it holds the module's import lock and would hang whatever imported the module next."""
    limit = IMPORT_LIMIT_S if limit_s is None else limit_s
    done = threading.Event()

    def watch() -> None:
        if done.wait(limit):
            return
        print(f"{_prefix()}{what} {spec!r}: importing it did not finish within {limit:g} s, so it likely waits for "
              "something that never comes (a lock, a socket, input); make its import return, and do slow "
              "set-up on the first call instead.", file=sys.stderr, flush=True)
        os._exit(2)

    threading.Thread(target=watch, name="scalerl-import-limit", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def _prefix() -> str:
    """``scalerl <command>: ``, as every sentence of a command begins (``train`` in a process
    the command spawned, whose own arguments are not a command's)."""
    commands = ("train", "sweep", "fit", "plan", "compare", "export", "serve", "report")
    given = sys.argv[1] if len(sys.argv) > 1 else ""
    return f"scalerl {given if given in commands else 'train'}: "


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else "no message"


def load(spec: str, what: str = "plug-in", base: str | Path | None = None) -> Any:
    """The object ``NAME`` of ``FILE.py:NAME`` or ``package.module:NAME``."""
    head, name = _split(spec, what)
    if head.endswith(".py"):
        path = Path(canonical(spec, what, base).rpartition(":")[0])
        module = _load_file(path, spec, what)
    else:
        try:
            with import_limit(spec, what):
                module = importlib.import_module(head)
        except ModuleNotFoundError as e:
            raise PluginError(f"{what} {spec!r}: no module named {e.name!r} can be imported") from None
        except Exception as e:  # noqa: BLE001 - the user's module: any failure is one sentence
            raise PluginError(f"{what} {spec!r}: module {head} does not load ({type(e).__name__}: "
                              f"{_first_line(e)})") from None
    target: Any = module
    for part in name.split("."):
        if not hasattr(target, part):
            where = head if head.endswith(".py") else f"module {head}"
            raise PluginError(f"{what} {spec!r}: there is no {name!r} in {where}")
        target = getattr(target, part)
    return target


def check_parameter(fn: Callable, parameter: str, spec: str, what: str) -> None:
    """Raise :class:`PluginError` unless ``fn`` is callable and can be called with the keyword
    ``parameter`` (named, or taken by ``**kwargs``)."""
    if not callable(fn):
        raise PluginError(f"{what} {spec!r} is a {type(fn).__name__}, not a function")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    ok = any(p.kind is p.VAR_KEYWORD or (p.name == parameter and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
             for p in params)
    if not ok:
        raise PluginError(f"{what} {spec!r} takes no {parameter!r} parameter; "
                          f"it is called as {fn.__name__}({parameter}=..., **fields).")
