"""Output files that would destroy data: refused before anything is written.

``scalerl fit victim.csv --json victim.csv`` used to replace the curve with its own fit, and
``--html out --plot out`` let one output overwrite the other. Every command that writes
files names its inputs and its outputs here first; an output that is one of the inputs, or
that another output of the same command also writes, is one sentence (a ``CurveError``),
and nothing has been written yet.

Two names are the same file when they are the same inode (an existing file reached through
``./x``, a symbolic link or a hard link), or, for files that do not exist yet, when their
resolved real paths are equal.

An output is written as a file beside it, renamed over it (``report.write``), so it must name a
regular file or none: an existing device (``/dev/full``, ``/dev/null``), named pipe, socket or
folder would be replaced by a file, for the whole machine in ``/dev``'s case, and is refused;
so is a path whose folder does not exist (a typo would otherwise make folders).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from scalerl.fit.errors import CurveError

__all__ = ["check_outputs", "not_writable", "same_file_key"]


def not_writable(path: str | Path) -> str | None:
    """Why ``path`` cannot be an output (module docstring), None where it can."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None if path.parent.is_dir() else f"its folder {path.parent} does not exist"
    except NotADirectoryError:
        return "a file stands where its folder should be"
    except (OSError, ValueError) as err:
        return f"it cannot be examined ({getattr(err, 'strerror', None) or err})"
    if stat.S_ISREG(mode):
        return None
    kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return f"it is {kind}, which writing would replace with a file; name a file"


def same_file_key(path: str | Path) -> tuple:
    """A key equal for two names of one file: its inode when it exists, else its real path.

    ``os.path.realpath`` never raises (a symbolic link loop resolves to some path), so a
    name that cannot be read still gets a key and the reader reports it later.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the name; the writer names it
        return ("path", os.path.realpath(os.path.abspath(path)))
    return ("inode", st.st_dev, st.st_ino)


def check_outputs(inputs: Iterable[str | Path], outputs: Mapping[str, str | Path | None]) -> None:
    """Raise ``CurveError`` when an output (``flag -> path``; None: not asked for) cannot be
    written (:func:`not_writable`), is one of ``inputs`` or the same file as another output. ``inputs`` lists every file read (and
    the folders given, so a folder named as an output is refused too)."""
    seen_inputs: dict[tuple, str] = {}
    for path in inputs:
        seen_inputs.setdefault(same_file_key(path), str(path))
    seen_outputs: dict[tuple, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        key = same_file_key(path)
        if key in seen_inputs:
            raise CurveError(
                f"{flag} {path} is the input {seen_inputs[key]}, which writing would overwrite; "
                "choose another output file (nothing was written)."
            )
        if (why := not_writable(path)) is not None:
            raise CurveError(f"{flag} {path}: {why} (nothing was written).")
        if key in seen_outputs:
            raise CurveError(
                f"{flag} {path} and {seen_outputs[key]} are the same file, so one output would "
                "overwrite the other; give each output its own name (nothing was written)."
            )
        seen_outputs[key] = f"{flag} {path}"
