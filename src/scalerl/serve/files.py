"""Every file ``scalerl serve`` reads, read through one door that never leaves the served folders.

A served folder is untrusted: anyone who can write a run folder can put a symbolic link in it
(``config.yaml -> /etc/passwd``), a file of any size, or bytes that are not what the name
says. So every read goes through :class:`Files`:

- the path is resolved and refused unless its real path lies inside one of the served
  folders (a symbolic link that leads out is refused like a ``..``), and the last component
  is opened with ``O_NOFOLLOW``, so a link swapped in after the check is refused too;
- only regular files are read, and at most ``limit`` bytes of them (a larger file is
  refused with its size, never read whole);
- what is read is parsed by the run folder's own parsers (``runfolder``): any problem is a
  :class:`runfolder.BadRunFile` sentence, which the page shows as the run's reason.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from scalerl import runfolder as rf

__all__ = ["Files", "Outside"]

MAX_LOG = 256 << 20  # a metrics.jsonl larger than this is shown unreadable with its size
MAX_SMALL = 4 << 20  # samples, the placement and the config


class Outside(rf.BadRunFile):
    """A path that leads out of the served folders."""


class Files:
    """Reads under ``roots`` only (module docstring)."""

    def __init__(self, roots) -> None:
        self.roots = [Path(r).resolve() for r in roots]

    def inside(self, path: Path) -> Path:
        """``path``'s real path, where it lies inside a served folder; :class:`Outside` otherwise."""
        try:
            real = Path(path).resolve(strict=True)
        except FileNotFoundError:
            raise
        except (OSError, RuntimeError) as err:
            raise rf.BadRunFile(f"{path} cannot be resolved ({err}).") from None
        if not any(real == r or real.is_relative_to(r) for r in self.roots):
            raise Outside(f"{path} leads outside the served folders; it is not served.")
        return real

    def open(self, path: Path, limit: int = MAX_SMALL) -> tuple[BinaryIO, int]:
        """The regular file ``path`` opened for reading and its size, at most ``limit`` bytes
        (FileNotFoundError where absent; the caller closes it)."""
        real = self.inside(path)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(real, flags)
        except FileNotFoundError:
            raise
        except OSError as err:
            raise rf.BadRunFile(f"{path} cannot be read ({err.strerror or err}).") from None
        handle = os.fdopen(fd, "rb")
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            handle.close()
            raise rf.BadRunFile(f"{path} is not a regular file.")
        if info.st_size > limit:
            handle.close()
            raise rf.BadRunFile(f"{path} is {info.st_size:,} bytes, more than this page reads ({limit:,}).")
        return handle, int(info.st_size)

    def read(self, path: Path, limit: int = MAX_SMALL) -> bytes:
        """At most ``limit`` bytes of the regular file ``path`` (FileNotFoundError where absent),
        read once (no copy of the whole beside it)."""
        handle, _ = self.open(path, limit)
        with handle:
            return handle.read(limit)

    def tail(self, path: Path, limit: int) -> bytes:
        """The last ``limit`` bytes of the regular file ``path`` (a log's last lines)."""
        real = self.inside(path)
        try:
            fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            raise
        except OSError as err:
            raise rf.BadRunFile(f"{path} cannot be read ({err.strerror or err}).") from None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise rf.BadRunFile(f"{path} is not a regular file.")
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - limit, 0))
            return handle.read(limit)

    def stamp(self, path: Path) -> tuple | None:
        """(size, modification time) of ``path``, None where absent or outside."""
        try:
            real = self.inside(path)
            info = real.stat()
        except (OSError, rf.BadRunFile):
            return None
        return info.st_size, info.st_mtime_ns

    def records(self, path: Path) -> list[dict[str, Any]]:
        """The records of a JSONL file (``runfolder.parse_records``); [] where absent."""
        try:
            data = self.read(path, MAX_LOG)
        except FileNotFoundError:
            return []
        return [r for _, r in rf.parse_records(data, path)]

    def config(self, folder: Path) -> dict[str, Any]:
        """A run's ``config.yaml`` (``runfolder.parse_config``); {} where absent."""
        try:
            return rf.parse_config(self.read(folder / rf.CONFIG, MAX_SMALL), folder / rf.CONFIG)
        except FileNotFoundError:
            return {}

    def text(self, path: Path, limit: int = MAX_SMALL) -> str | None:
        """A text file, None where absent; bytes that are not UTF-8 are replaced."""
        try:
            return self.read(path, limit).decode("utf-8", "replace")
        except FileNotFoundError:
            return None
