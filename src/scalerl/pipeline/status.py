"""A run says what it is doing in its folder's ``status.json`` (``runfolder.write_status``), so
``serve``, ``sweep`` and ``report`` read one state instead of guessing it from the records.

While :func:`reported` holds: ``running`` (with the process id) from the start; on the way out
``finished`` (how it ended: its steps, its compute or its time limit), ``stopped`` (a signal,
or the rule whose sentence ended it: ``stopped_early``) or ``failed`` (the error's first line).
A run killed outright keeps ``running``; its files stop changing, which ``runfolder.run_state``
reads as ``paused``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scalerl.runfolder import STOPPED_EARLY, write_status

__all__ = ["Ending", "reported"]


class Ending:
    """How the run ended, set by the loop before :func:`reported` writes it."""

    def __init__(self) -> None:
        self.record: dict[str, Any] = {}
        self.how = ""

    def ended(self, record: dict[str, Any], how: str) -> None:
        self.record, self.how = record, how


@contextmanager
def reported(run_dir: Path) -> Iterator[Ending]:
    """Write the run's state as it starts and as it ends (module docstring)."""
    from scalerl.pipeline.stop import Stopped

    ending = Ending()
    write_status(run_dir, "running", host=os.uname().nodename)
    try:
        yield ending
    except Stopped as stop:
        write_status(run_dir, "stopped", str(stop), code=stop.code)
        raise
    except BaseException as err:
        write_status(run_dir, "failed", f"{type(err).__name__}: {err}".strip())
        raise
    if STOPPED_EARLY in ending.record:
        write_status(run_dir, "stopped", str(ending.record[STOPPED_EARLY]), step=ending.record.get("step"))
    else:
        write_status(run_dir, "finished", ending.how, step=ending.record.get("step"))
