"""Which log in a folder of a walk is one run of another trainer: TRL's ``trainer_state.json``,
a TensorBoard folder (NeMo-RL, OpenRLHF, TRL's ``report_to``) or a W&B run's local folder.

The one rule for every walk through a folder of runs (``serve`` listing runs, ``--prior-runs
DIR`` learning a prior): a run read twice would be listed twice, or counted twice in a prior,
which then claims more runs and less spread than it has. A scalerl run folder is not decided
here: its ``metrics.jsonl`` is its log and its ``tb/`` mirror is passed by
(``runfolder.walk``).
"""

from __future__ import annotations

from pathlib import Path

from scalerl.fit.readers import TENSORBOARD
from scalerl.fit.readers.jsonl import TRAINER_STATE
from scalerl.runfolder import METRICS

__all__ = ["TRL_CHECKPOINT", "WANDB_SUFFIX", "trainer_log"]

WANDB_SUFFIX = ".wandb"  # a W&B run's local log (wandb/run-*/run-*.wandb)
TRL_CHECKPOINT = "checkpoint-"  # a Hugging Face trainer's checkpoint folders, each with a copy of its state


def trainer_log(folder: Path, files: set[str], newest: dict[Path, Path | None] | None = None) -> Path | None:
    """What a reader reads in ``folder`` (``runfolder.walk``'s file names), None where it holds
    no other trainer's log: its ``trainer_state.json``, or the folder itself (TensorBoard, W&B).
    A checkpoint's state is a copy of the run's up to then: it is read only where the run's
    folder has no state of its own, and only the newest checkpoint's. ``newest``: each parent's
    newest checkpoint, found once per walk (a run with many checkpoints is looked up once, not
    once per checkpoint)."""
    if METRICS in files:
        return None  # a scalerl run folder (its tb/ mirrors its log)
    if TRAINER_STATE in files:
        if folder.name.startswith(TRL_CHECKPOINT):
            parent = folder.parent
            if (parent / TRAINER_STATE).is_file():
                return None
            newest = {} if newest is None else newest
            if parent not in newest:
                newest[parent] = _newest_checkpoint(parent)
            if folder != newest[parent]:
                return None
        return folder / TRAINER_STATE
    if any(TENSORBOARD in f for f in files) or any(f.endswith(WANDB_SUFFIX) for f in files):
        return folder
    return None


def _newest_checkpoint(parent: Path) -> Path | None:
    def number(p: Path) -> int:
        tail = p.name[len(TRL_CHECKPOINT):]
        return int(tail) if tail.isdigit() else -1

    found = [p for p in parent.glob(f"{TRL_CHECKPOINT}*") if (p / TRAINER_STATE).is_file()]
    return max(found, key=number, default=None)
