"""Other trainers' logs as served runs: TRL's ``trainer_state.json``, a TensorBoard folder
(NeMo-RL, OpenRLHF, TRL's ``report_to``) and a W&B run's local folder, found beside scalerl's
own runs and listed with them, live or finished. Which folder holds one is
``fit.readers.discover.trainer_log``'s rule, the one ``--prior-runs DIR`` follows too.

Each is read by the one reader ``scalerl fit`` and ``plan`` use (``fit.forecast.log.read_log_file``:
the trainer's names detected, no columns named), so the served forecast is ``plan``'s on the
same log. The log becomes the records a page reads: one per evaluation (its x as the step and
the compute, the value as the forecast metric) and one per training-reward point. A log has no
``status.json``: it is ``running`` while it changed within ``runfolder.LIVE_S``, else
``finished`` (a trainer that stopped writing says nothing more).
"""

from __future__ import annotations

import time
from pathlib import Path

from scalerl import runfolder as rf

__all__ = ["log_records", "log_stamp", "log_state"]


def _files(log: Path) -> list[Path]:
    return sorted(p for p in log.iterdir() if p.is_file()) if log.is_dir() else [log]


def log_stamp(log: Path) -> tuple:
    """The (name, size, mtime) of every file the log is (a folder's: each of its files)."""
    out = []
    for p in _files(log):
        try:
            st = p.stat()
        except OSError:
            continue
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def log_state(log: Path, now: float | None = None) -> rf.RunState:
    """``running`` while the log changed within ``runfolder.LIVE_S``, else ``finished``."""
    now = time.time() if now is None else now
    newest = max((s[2] for s in log_stamp(log)), default=0) / 1e9
    quiet = now - newest
    if quiet <= rf.LIVE_S:
        return rf.RunState("running", f"its log changed {quiet:.0f} s ago")
    return rf.RunState("finished", f"its log has not changed for {quiet / 60:.0f} min (another trainer's log)")


def log_records(run_log) -> list[dict]:
    """The records a page reads from a ``RunLog``: each evaluation at its x (step and compute),
    then each training-reward point, in x order."""
    curve = run_log.curve
    rows = [{rf.STEP: float(c), rf.COMPUTE: float(c), rf.VAL_PASS_RATE: float(y)}
            for c, y in zip(curve.compute, curve.reward)]  # fmt: skip
    train = run_log.train
    if train is not None:
        rows += [{rf.STEP: float(c), rf.COMPUTE: float(c), rf.TRAIN_REWARD: float(y)}
                 for c, y in zip(train.compute, train.reward)]  # fmt: skip
    return sorted(rows, key=lambda r: (r[rf.COMPUTE], rf.TRAIN_REWARD in r))
