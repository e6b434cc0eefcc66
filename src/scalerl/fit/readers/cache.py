"""A parsed log kept while its file is unchanged, so one command reads each file once.

``scalerl plan RUN`` asks one log for its validation curve, its training reward and its clock;
``scalerl fit`` for the curve and the training reward. Each reader parses a file's whole table
(the CSV rows, the TensorBoard scalars, the JSONL records) and picks its columns after, so the
parse is kept here, keyed by the file's resolved path, its size and modification time: a second
column of the same file costs no read, and a file that changed is parsed again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["parsed"]

T = TypeVar("T")
_KEPT: OrderedDict[tuple, object] = OrderedDict()
MAX_KEPT = 16  # files: a command reads a few; a walk through a folder of priors reads each once


def parsed(path: Path, what: str, parse: Callable[[], T]) -> T:
    """``parse()`` for ``path``, once per version of the file (module docstring)."""
    try:
        path = Path(path)
        files = sorted(path.iterdir()) if path.is_dir() else [path]  # a folder: its files' versions
        key = (str(path.resolve()), what, *((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files))
    except OSError:
        return parse()  # the parser names what is wrong with the file
    if key in _KEPT:
        _KEPT.move_to_end(key)
        return _KEPT[key]  # type: ignore[return-value]
    value = parse()
    _KEPT[key] = value
    while len(_KEPT) > MAX_KEPT:
        _KEPT.popitem(last=False)
    return value
