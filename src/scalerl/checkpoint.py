"""Atomic checkpoints of a whole run, and their loading for ``scalerl train --resume``.

A checkpoint is a directory ``RUN_DIR/checkpoint`` holding ``state.pt`` (model, optimiser,
LR schedule, RNG states, curriculum, the queue of received-but-untrained groups and the
dispatched-but-unreturned prompts, step, policy version, compute spent) and ``meta.json``.

Atomicity, so that a ``kill -9`` at any instant leaves a loadable run:

1. write everything into a fresh ``RUN_DIR/.checkpoint.tmp-*`` directory, fsync each file,
   then write ``meta.json`` last (its presence marks the directory complete) and fsync;
2. rename the current ``checkpoint`` to ``checkpoint.old`` (the previous one is kept until the
   new one is in place), rename the temp directory to ``checkpoint``, fsync ``RUN_DIR``;
3. delete ``checkpoint.old``.

A crash between the two renames leaves only ``checkpoint.old``, which :func:`load_checkpoint`
falls back to; half-written temp directories are ignored and swept away.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CURRENT, PREVIOUS, TMP_PREFIX = "checkpoint", "checkpoint.old", ".checkpoint.tmp-"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states of this process."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: Path, state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``state`` (anything ``torch.save`` pickles) and ``meta`` atomically; see module doc."""
    run_dir = Path(run_dir)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=run_dir))
    with open(tmp / "state.pt", "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    _write_synced(tmp / "meta.json", json.dumps(meta, indent=1).encode())
    _fsync_dir(tmp)
    current, previous = run_dir / CURRENT, run_dir / PREVIOUS
    if current.exists():
        if previous.exists():
            shutil.rmtree(previous)
        os.rename(current, previous)
    os.rename(tmp, current)
    _fsync_dir(run_dir)
    shutil.rmtree(previous, ignore_errors=True)
    return current


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    for name in (CURRENT, PREVIOUS):
        candidate = Path(run_dir) / name
        if (candidate / "meta.json").is_file() and (candidate / "state.pt").is_file():
            return candidate
    return None


def load_checkpoint(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(state, meta)`` of the newest complete checkpoint (None if there is none); stale temp
    directories left by a crash are removed."""
    run_dir = Path(run_dir)
    for stale in run_dir.glob(TMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    found = latest_checkpoint(run_dir)
    if found is None:
        return None
    meta = json.loads((found / "meta.json").read_text())
    # our own file: it pickles numpy records (queued groups) besides tensors
    state = torch.load(found / "state.pt", map_location="cpu", weights_only=False)
    return state, meta
