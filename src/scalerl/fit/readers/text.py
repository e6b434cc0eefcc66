"""Text logs read safely: binary data and bytes that are not UTF-8 are one sentence naming
the file and line (the CSV and JSONL readers share these)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from scalerl.fit.errors import CurveError

__all__ = ["read_text", "text_lines"]


def _not_binary(path: Path, head: bytes) -> None:
    if b"\0" in head:
        raise CurveError(f"{path} is not a text log: it holds binary data.")


def _not_utf8(path: Path, line: int, err: UnicodeDecodeError) -> CurveError:
    byte = err.object[err.start]
    return CurveError(f"{path} line {line} is not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8.")


def read_text(path: Path) -> str:
    """The file as text; binary data or bytes that are not UTF-8 are one sentence naming the line."""
    data = path.read_bytes()
    _not_binary(path, data[:8192])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise _not_utf8(path, data[: err.start].count(b"\n") + 1, err) from None


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text with its newline) one line at a time, checked as :func:`read_text`."""
    with path.open("rb") as handle:
        _not_binary(path, handle.read(8192))
        handle.seek(0)
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise _not_utf8(path, number, err) from None
