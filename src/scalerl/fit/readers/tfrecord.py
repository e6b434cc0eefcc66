"""TFRecord framing of TensorBoard event files: the whole records, and where bytes were lost.

Each record is a little-endian u64 data length, the masked CRC32C of those 8 bytes (u32),
the data, and the masked CRC32C of the data (u32). TensorBoard's reader stops at the first
record whose CRC fails, silently: one flipped byte mid-file used to lose every point after
it, and a length field set to 2^62 looked like a file cut short. :func:`scan` walks the
framing itself, checks both CRCs of every record, and after a bad one resyncs on the next
offset where a whole record (both CRCs right) starts, so the caller can keep the good
records after the damage and say exactly which bytes it skipped.

Pure Python (no TensorFlow, no compiled CRC package): the CRC costs about as much as
TensorBoard's own pure-Python check of the same bytes.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

__all__ = ["Damage", "Framing", "crc32c", "masked_crc32c", "scan"]


def _table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return tuple(table)


_TABLE = _table()
_ZEROS = bytes(12)
_NONZERO = re.compile(rb"[^\x00]")


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``; ``crc32c(b"123456789") == 0xE3069283``."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC as TFRecord stores it: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass(frozen=True)
class Damage:
    """A stretch of bytes that is no whole record, skipped to the next whole record."""

    offset: int  # byte where the stretch starts
    record: int  # 1-based number the record starting there would have had
    skipped: int  # bytes skipped


@dataclass(frozen=True)
class Framing:
    """What :func:`scan` found in one file."""

    records: tuple[tuple[int, int], ...]  # (offset, size with framing) of each whole record
    damage: tuple[Damage, ...]  # stretches skipped mid-file, each followed by a whole record
    tail: int  # bytes at the end that are no whole record (not read)
    torn: bool  # the tail is one record cut short (a run killed mid-write, a partial copy)


def _header_ok(data: bytes, p: int) -> bool:
    if p + 12 > len(data):
        return False
    return struct.unpack_from("<I", data, p + 8)[0] == masked_crc32c(data[p : p + 8])


def _whole_at(data: bytes, p: int) -> int | None:
    """Size (framing included) of the whole record at ``p``, or None if there is none."""
    if p + 16 > len(data) or not _header_ok(data, p):
        return None
    (length,) = struct.unpack_from("<Q", data, p)
    end = p + 12 + length
    if end + 4 > len(data):
        return None
    if struct.unpack_from("<I", data, end)[0] != masked_crc32c(data[p + 12 : end]):
        return None
    return 16 + length


def _next_record(data: bytes, after: int) -> int | None:
    """The first offset past ``after`` where a whole record starts, or None.

    A record's length is below 2^32 (a 4 GB event is not a scalar log), so the header's
    bytes 4..8 are zero: ``bytes.find`` jumps between such places at C speed and only they
    get the CRC check.
    """
    start = after + 5  # zeros at start .. start+4: a header at after+1
    while True:
        i = data.find(b"\0\0\0\0", start)
        if i < 0:
            return None
        if data[i - 4 : i + 8] == _ZEROS:
            # 12 zero bytes are no header (the CRC of a zero length is not 0): skip a zero-filled
            # stretch (a crash's unwritten blocks) at C speed to where its last 12 bytes begin
            nonzero = _NONZERO.search(data, i)
            if nonzero is None:
                return None
            start = max(i + 1, nonzero.start() - 7)
            continue
        if _whole_at(data, i - 4) is not None:
            return i - 4
        start = i + 1


def scan(data: bytes) -> Framing:
    """The whole records of a TFRecord file's bytes, the damaged stretches between them, and
    the tail no whole record follows."""
    records: list[tuple[int, int]] = []
    damage: list[Damage] = []
    p = 0
    while p < len(data):
        size = _whole_at(data, p)
        if size is not None:
            records.append((p, size))
            p += size
            continue
        q = _next_record(data, p)
        if q is None:
            break
        damage.append(Damage(p, len(records) + 1, q - p))
        p = q
    tail = len(data) - p
    # a header cut short, or a right header whose data runs past the end
    torn = 0 < tail and (tail < 12 or (_header_ok(data, p) and p + 16 + struct.unpack_from("<Q", data, p)[0] > len(data)))
    return Framing(tuple(records), tuple(damage), tail, torn)
