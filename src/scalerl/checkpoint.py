"""Atomic checkpoints of a whole run, the last two kept, and their loading for ``--resume``.

A checkpoint is a directory holding ``state.pt`` (model, optimiser, LR schedule, RNG states,
curriculum, the queue of received-but-untrained groups and the dispatched-but-unreturned
prompts, step, policy version, compute spent) and ``meta.json``. A run directory keeps two:
``RUN_DIR/checkpoint`` (the newest) and ``RUN_DIR/checkpoint.old`` (the one before it).

Atomicity, so that a ``kill -9`` at any instant leaves a loadable run:

1. write everything into a fresh ``RUN_DIR/.checkpoint.tmp-*`` directory, fsync each file,
   then write ``meta.json`` last (its presence marks the directory complete) and fsync;
2. rename ``checkpoint.old`` (the third newest, now superseded) to a ``.checkpoint.tmp-*``
   name, rename ``checkpoint`` to ``checkpoint.old``, rename the temp directory to
   ``checkpoint``, fsync ``RUN_DIR``;
3. delete the superseded directory.

At every instant at least one complete checkpoint is in place (after the first): a crash
between the renames leaves ``checkpoint.old``; half-written temp directories are ignored and
swept away by :func:`load_checkpoint`.

Loading tries ``checkpoint``, then ``checkpoint.old``. A newest checkpoint that does not
load (a truncated ``state.pt``, a missing or corrupt ``meta.json``) is set aside as
``checkpoint.broken`` (kept for inspection, out of the rotation) and the run resumes from
the older one, with a sentence saying so; when none loads, :class:`CheckpointError` says why
in one sentence. A failed write (a full disk) removes its temp directory, leaves the
previous checkpoints as they were and raises :class:`CheckpointError` naming the folder and
the bytes it needed.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scalerl.runfolder import CHECKPOINT as CURRENT  # the run folder names them
from scalerl.runfolder import CHECKPOINT_BROKEN as BROKEN
from scalerl.runfolder import CHECKPOINT_OLD as PREVIOUS

TMP_PREFIX = ".checkpoint.tmp-"
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or loaded; the message is one sentence."""


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


def _write_state(path: Path, state: dict[str, Any]) -> None:
    with open(path, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` all at once: a temp file beside it, fsync, rename, fsync
    the folder. A crash leaves the old content or the new one, never a torn file."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        _write_synced(Path(name), data)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch RNG states of this process (every CUDA device's too, when any)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def to_cpu(state: Any) -> Any:
    """``state`` with every tensor copied to the CPU (recursively through dicts, lists and
    tuples): a checkpoint never allocates on a GPU shared with generators, and loads anywhere."""
    if torch.is_tensor(state):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {k: to_cpu(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(to_cpu(v) for v in state)
    return state


# ---------------------------------------------------------------------------- writing


def save_checkpoint(run_dir: Path, state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``state`` (anything ``torch.save`` pickles) and ``meta`` atomically; see module doc.

    Raises :class:`CheckpointError` (the previous checkpoints untouched) when the write fails.
    """
    run_dir = Path(run_dir)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=run_dir))
        _write_state(tmp / "state.pt", state)
        _write_synced(tmp / "meta.json", json.dumps(meta, indent=1).encode())
        _fsync_dir(tmp)
    except (OSError, RuntimeError) as err:  # torch reports a failed write as RuntimeError
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(run_dir, state, err) from None
    current, previous = run_dir / CURRENT, run_dir / PREVIOUS
    superseded = tmp.with_name(tmp.name + "-superseded")  # a temp name: swept if we crash
    if current.exists():
        if previous.exists():
            os.rename(previous, superseded)
        os.rename(current, previous)
    os.rename(tmp, current)
    _fsync_dir(run_dir)
    shutil.rmtree(superseded, ignore_errors=True)
    return current


def _payload_bytes(obj: Any) -> int:
    """Bytes of the tensors and arrays in ``obj`` (dicts, lists and tuples walked)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(_payload_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_payload_bytes(v) for v in obj)
    return 0


def _needed_bytes(run_dir: Path, state: dict[str, Any]) -> int:
    """An estimate of one checkpoint's size: its tensors, or the last one's size if larger."""
    sizes = [_payload_bytes(state)]
    for name in (CURRENT, PREVIOUS):
        saved = run_dir / name / "state.pt"
        if saved.is_file():
            sizes.append(saved.stat().st_size)
    return max(sizes)


def _is_disk_full(err: BaseException | None) -> bool:
    while err is not None:
        if isinstance(err, OSError) and err.errno in _DISK_FULL:
            return True
        err = err.__cause__ or err.__context__
    return False


def _free_bytes(run_dir: Path) -> int | None:
    try:
        return shutil.disk_usage(run_dir).free
    except OSError:
        return None


def _write_error(run_dir: Path, state: dict[str, Any], err: BaseException) -> CheckpointError:
    need, free = _needed_bytes(run_dir, state), _free_bytes(run_dir)
    kept = ("the previous checkpoint is intact" if (run_dir / CURRENT).is_dir() or (run_dir / PREVIOUS).is_dir()
            else "no checkpoint was written")
    if _is_disk_full(err) or (isinstance(err, RuntimeError) and free is not None and free < need):
        free_text = "" if free is None else f", {free:,} bytes are free"
        return CheckpointError(
            f"no space left in {run_dir} for a checkpoint: it needs about {need:,} bytes "
            f"({need / 2**20:.1f} MiB){free_text}; {kept} (free some space and --resume {run_dir}).")
    reason = err.strerror if isinstance(err, OSError) and err.strerror else _first_line(err)
    return CheckpointError(f"cannot write a checkpoint in {run_dir} ({reason}); {kept}.")


# ---------------------------------------------------------------------------- loading


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete-looking checkpoint directory (both files present), or None."""
    for name in (CURRENT, PREVIOUS):
        candidate = Path(run_dir) / name
        if (candidate / "meta.json").is_file() and (candidate / "state.pt").is_file():
            return candidate
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def _load_one(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state, meta)`` of one checkpoint directory; a fragment of a sentence on failure."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path.name}/meta.json is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path.name}/meta.json is corrupt ({_first_line(err)})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        raise CheckpointError(f"{path.name}/meta.json has no integer 'step'")
    if not (path / "state.pt").is_file():
        raise CheckpointError(f"{path.name}/state.pt is missing")
    try:
        # our own file: it pickles numpy records (queued groups) besides tensors
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
    except Exception as err:  # a torn or corrupt pickle/zip raises assorted errors
        raise CheckpointError(f"{path.name}/state.pt does not load ({_first_line(err)})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path.name}/state.pt does not hold a run state")
    return state, meta


def read_checkpoint(run_dir: Path, log: Callable[[str], Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state, meta)`` of the newest checkpoint that loads, changing nothing in ``run_dir``
    (for readers such as ``scalerl export``); :class:`CheckpointError` when none does. An
    older checkpoint read because the newest does not load is said through ``log``."""
    failures = []
    for name in (CURRENT, PREVIOUS):
        if (Path(run_dir) / name).is_dir():
            try:
                state, meta = _load_one(Path(run_dir) / name)
            except CheckpointError as err:
                failures.append(str(err).rstrip("."))
                continue
            if failures and log is not None:
                log(f"the newest checkpoint does not load ({failures[0]}); read the older "
                    f"{Path(run_dir) / name} at step {meta['step']} instead.")
            return state, meta
    raise CheckpointError(f"no checkpoint in {run_dir} loads" + (f": {'; '.join(failures)}." if failures else
                                                                  " (there is none yet)."))


def load_checkpoint(
    run_dir: Path, log: Callable[[str], Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(state, meta)`` of the newest checkpoint that loads, None if there is none.

    Stale temp directories left by a crash are removed. A newest checkpoint that does not
    load is set aside as ``checkpoint.broken`` and the older one used, said through ``log``;
    :class:`CheckpointError` when checkpoints exist but none loads.
    """
    run_dir = Path(run_dir)
    for stale in run_dir.glob(TMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    candidates = [run_dir / name for name in (CURRENT, PREVIOUS) if (run_dir / name).is_dir()]
    if not candidates:
        return None
    failures: list[str] = []
    for candidate in candidates:
        try:
            state, meta = _load_one(candidate)
        except CheckpointError as err:
            failures.append(str(err))
            continue
        if failures:
            _set_aside(run_dir / CURRENT)
            if log is not None:
                log(f"the newest checkpoint does not load ({failures[0]}); resuming from the older "
                    f"{candidate} at step {meta['step']} instead (the broken one is kept as {run_dir / BROKEN}).")
        return state, meta
    raise CheckpointError(f"no checkpoint in {run_dir} loads: {'; '.join(failures)}.")


def _set_aside(broken: Path) -> None:
    """Move a checkpoint that does not load out of the rotation (kept as ``checkpoint.broken``)."""
    target = broken.with_name(BROKEN)
    if target.exists():
        shutil.rmtree(target)
    os.rename(broken, target)
    _fsync_dir(broken.parent)
