"""TFRecord framing: whole records, corrupt stretches resynced past, and the tail not read.

The damaged files are made from a real event file (tensorboard's own writer) with one byte
flipped, a length field set to 2^62, or zeros written over a stretch; the expected record
counts follow from the file having 1 + 2n records (the file version, then two scalars a step).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from scalerl.fit.errors import CurveWarning
from scalerl.fit.readers import read_curves
from scalerl.fit.readers.tfrecord import crc32c, masked_crc32c, scan

from .._files import synthetic_curve, write_tensorboard

N = 21  # points; the file holds 1 + 2 * N records


@pytest.fixture
def event(tmp_path):
    (path,) = write_tensorboard(tmp_path / "tb", *synthetic_curve(n=N)).iterdir()
    return path


def test_crc32c_matches_the_published_check_value_and_tensorboard():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as reference

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720, B.4)
    for data in (b"", b"\0" * 8, bytes(range(256))):
        assert masked_crc32c(data) == reference(data)


def test_a_whole_file_has_every_record_and_no_damage(event):
    framing = scan(event.read_bytes())
    assert len(framing.records) == 1 + 2 * N and framing.damage == () and framing.tail == 0
    assert not framing.torn


def _damaged(event, record: int, how: str) -> tuple[bytes, tuple[int, int]]:
    data = bytearray(event.read_bytes())
    offset, size = scan(bytes(data)).records[record]
    if how == "flip":  # one byte of the record's data
        data[offset + 14] ^= 0xFF
    elif how == "length":
        data[offset : offset + 8] = struct.pack("<Q", 2**62)
    return bytes(data), (offset, size)


@pytest.mark.parametrize("how", ["flip", "length"])
def test_a_corrupt_record_mid_file_is_skipped_and_the_rest_kept(event, how):
    data, (offset, size) = _damaged(event, N, how)
    framing = scan(data)
    assert len(framing.records) == 2 * N  # only the damaged record is lost
    (damage,) = framing.damage
    assert (damage.offset, damage.record, damage.skipped) == (offset, N + 1, size)
    assert framing.tail == 0


def test_zeros_over_the_middle_are_skipped_to_the_next_whole_record(event):
    data = bytearray(event.read_bytes())
    records = scan(bytes(data)).records
    start, end = records[5][0], records[9][0]  # records 6..9 zeroed, as a crash's unwritten blocks
    data[start:end] = bytes(end - start)
    framing = scan(bytes(data))
    assert len(framing.records) == 1 + 2 * N - 4
    assert [(d.offset, d.skipped) for d in framing.damage] == [(start, end - start)]


def test_a_tail_is_torn_only_when_a_right_header_runs_past_the_end(event):
    data = event.read_bytes()
    last_offset, _ = scan(data).records[-1]
    torn = scan(data[:-3])
    assert torn.torn and torn.tail == len(data) - 3 - last_offset
    broken = bytearray(data)  # the last header's length broken: corrupt, not cut short
    broken[last_offset : last_offset + 8] = struct.pack("<Q", 2**62)
    framing = scan(bytes(broken))
    assert not framing.torn and framing.tail == len(data) - last_offset
    assert len(framing.records) == 2 * N


def test_reading_a_damaged_file_warns_where_and_keeps_the_points_after(event, tmp_path):
    (clean,) = read_curves(event)
    data, (offset, _) = _damaged(event, N + 1, "length")  # a reward record of the second half
    event.write_bytes(data)
    with pytest.warns(CurveWarning) as caught:
        (curve,) = read_curves(event)
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(f"{event}: 1 corrupt stretch(es) fail the CRC check, the first at byte "
                              f"{offset} where record {N + 2} starts")
    assert len(curve) == N - 1  # one point lost, not the second half of the file
    kept = np.isin(clean.compute, curve.compute)
    np.testing.assert_array_equal(clean.reward[kept], curve.reward)


def test_a_file_that_cannot_resync_says_how_many_bytes_were_not_read(event):
    data = bytearray(event.read_bytes())
    offset = scan(bytes(data)).records[-4][0]
    data[offset:] = b"\xff" * (len(data) - offset)  # no whole record after it
    event.write_bytes(bytes(data))
    with pytest.warns(CurveWarning, match=rf"record {2 * N - 2} at byte {offset} is corrupt and no whole "
                                          rf"record follows it; stopped there, so the last "
                                          rf"{len(data) - offset} bytes were not read"):
        (curve,) = read_curves(event)
    assert len(curve) == N - 2
