"""Atomic checkpoints: complete or absent, the previous one kept until the new one is in place."""

from __future__ import annotations

import os

import torch

from scalerl.checkpoint import (
    PREVIOUS,
    TMP_PREFIX,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def test_round_trip_and_replacement(tmp_path):
    save_checkpoint(tmp_path, {"w": torch.ones(3), "groups": [1, 2]}, {"step": 5})
    save_checkpoint(tmp_path, {"w": torch.zeros(3), "groups": []}, {"step": 10})
    state, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 10 and torch.equal(state["w"], torch.zeros(3))
    assert not (tmp_path / PREVIOUS).exists()
    assert not list(tmp_path.glob(TMP_PREFIX + "*"))


def test_crash_between_renames_falls_back_to_previous(tmp_path):
    save_checkpoint(tmp_path, {"v": 1}, {"step": 1})
    # the state after "rename checkpoint -> checkpoint.old" and before the new one lands
    os.rename(tmp_path / "checkpoint", tmp_path / PREVIOUS)
    state, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 1 and state["v"] == 1


def test_half_written_temp_dirs_are_ignored_and_swept(tmp_path):
    save_checkpoint(tmp_path, {"v": 1}, {"step": 1})
    torn = tmp_path / (TMP_PREFIX + "abc")
    torn.mkdir()
    (torn / "state.pt").write_bytes(b"partial")
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint"
    _, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 1 and not torn.exists()


def test_no_checkpoint_is_none(tmp_path):
    assert load_checkpoint(tmp_path) is None
