"""Atomic checkpoints: complete or absent, the last two kept, a broken newest one skipped."""

from __future__ import annotations

import errno
import json
import os
import re
from collections import namedtuple

import pytest
import torch

from scalerl import checkpoint
from scalerl.checkpoint import (
    BROKEN,
    PREVIOUS,
    TMP_PREFIX,
    CheckpointError,
    atomic_write,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def _steps(run_dir) -> dict[str, int]:
    """step of each checkpoint in the rotation (``checkpoint.broken`` is out of it)"""
    return {d.name: json.loads((d / "meta.json").read_text())["step"]
            for d in run_dir.iterdir() if (d / "meta.json").is_file() and d.name != BROKEN}


def test_round_trip_keeps_the_last_two(tmp_path):
    save_checkpoint(tmp_path, {"w": torch.ones(3), "groups": [1, 2]}, {"step": 5})
    save_checkpoint(tmp_path, {"w": torch.zeros(3), "groups": []}, {"step": 10})
    save_checkpoint(tmp_path, {"w": torch.full((3,), 2.0), "groups": []}, {"step": 15})
    state, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 15 and torch.equal(state["w"], torch.full((3,), 2.0))
    assert _steps(tmp_path) == {"checkpoint": 15, PREVIOUS: 10}
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


def _truncate_state(d):
    data = (d / "state.pt").read_bytes()
    (d / "state.pt").write_bytes(data[: len(data) // 2])


def _corrupt_meta(d):
    (d / "meta.json").write_text('{"step": 2')


def _remove_meta(d):
    (d / "meta.json").unlink()


@pytest.mark.parametrize("damage, reason", [
    (_truncate_state, "checkpoint/state.pt does not load"),
    (_corrupt_meta, "checkpoint/meta.json is corrupt"),
    (_remove_meta, "checkpoint/meta.json is missing"),
])
def test_a_newest_checkpoint_that_does_not_load_falls_back_to_the_older(tmp_path, damage, reason):
    save_checkpoint(tmp_path, {"w": torch.ones(1000)}, {"step": 1})
    save_checkpoint(tmp_path, {"w": torch.zeros(1000)}, {"step": 2})
    damage(tmp_path / "checkpoint")
    said = []
    state, meta = load_checkpoint(tmp_path, log=said.append)
    assert meta["step"] == 1 and torch.equal(state["w"], torch.ones(1000))
    (sentence,) = said
    assert reason in sentence and "resuming from the older" in sentence and "\n" not in sentence
    assert (tmp_path / BROKEN).is_dir()  # kept for inspection, out of the rotation
    save_checkpoint(tmp_path, {"w": torch.zeros(1000)}, {"step": 2})  # the run goes on
    assert _steps(tmp_path) == {"checkpoint": 2, PREVIOUS: 1}


def test_no_checkpoint_that_loads_is_one_sentence(tmp_path):
    save_checkpoint(tmp_path, {"v": 1}, {"step": 1})
    save_checkpoint(tmp_path, {"v": 2}, {"step": 2})
    _corrupt_meta(tmp_path / "checkpoint")
    _truncate_state(tmp_path / PREVIOUS)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(tmp_path)
    message = str(err.value)
    assert message.startswith(f"no checkpoint in {tmp_path} loads: ") and "\n" not in message
    assert "checkpoint/meta.json is corrupt" in message and "checkpoint.old/state.pt" in message


def test_a_full_disk_names_the_folder_and_bytes_and_keeps_the_previous(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, {"w": torch.ones(1000)}, {"step": 1})
    save_checkpoint(tmp_path, {"w": torch.ones(1000)}, {"step": 2})

    def full(path, state):
        path.write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "_write_state", full)
    with pytest.raises(CheckpointError) as err:
        save_checkpoint(tmp_path, {"w": torch.ones(1000)}, {"step": 3})
    message = str(err.value)
    assert re.match(rf"no space left in {re.escape(str(tmp_path))} for a checkpoint: it needs about "
                    r"[\d,]+ bytes \([\d.]+ MiB\), [\d,]+ bytes are free;", message)
    assert "the previous checkpoint is intact" in message and "\n" not in message
    assert _steps(tmp_path) == {"checkpoint": 2, PREVIOUS: 1}
    assert not list(tmp_path.glob(TMP_PREFIX + "*"))
    monkeypatch.undo()
    assert load_checkpoint(tmp_path)[1]["step"] == 2


def test_torch_reporting_a_short_write_on_a_full_disk_is_the_same_sentence(tmp_path, monkeypatch):
    def short(path, state):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(checkpoint, "_write_state", short)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage",
                        lambda p: namedtuple("usage", "total used free")(10**6, 10**6 - 10, 10))
    with pytest.raises(CheckpointError, match="no space left in .* 10 bytes are free; no checkpoint"):
        save_checkpoint(tmp_path, {"w": torch.ones(1000)}, {"step": 1})


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "config.yaml"
    atomic_write(target, b"old: 1\n")
    atomic_write(target, b"new: 2\n")
    assert target.read_bytes() == b"new: 2\n"

    def fail(path, data):
        path.write_bytes(data[:2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "_write_synced", fail)
    with pytest.raises(OSError):
        atomic_write(target, b"newer: 3\n")
    assert target.read_bytes() == b"new: 2\n" and [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_learner_state_is_a_copy_not_a_view_of_the_live_weights():
    from scalerl.checkpoint import to_cpu

    live = {"model": {"w": torch.ones(3)}, "optimizer": {"state": {0: {"exp_avg": torch.zeros(3)}}}, "v": 2,
            "groups": [torch.ones(1), (torch.zeros(1),)]}
    copy = to_cpu(live)
    live["model"]["w"].add_(1.0)
    live["optimizer"]["state"][0]["exp_avg"].add_(1.0)
    assert copy["model"]["w"].tolist() == [1.0] * 3 and copy["optimizer"]["state"][0]["exp_avg"].sum() == 0
    assert copy["v"] == 2 and isinstance(copy["groups"][1], tuple)
