"""``train.max_minutes``: the whole run's minutes, resumes included.

The limit once restarted with every ``--resume``: a run killed at minute 6 of 6.5 got 6.5 more,
while its records' ``wall_s`` (``scalerl.compute.ComputeMeter``: the earlier sessions' seconds
up to their last checkpoint, plus this session's) counted on across the resume. So the limit
is read on that same clock: the run ends at the first step whose ``wall_s`` passes
``60 × train.max_minutes``. The deadline is computed once, when the loop starts, as a
``time.monotonic()`` instant, and handed to everything that acts on or shows it (the loop's
stop, the progress line's ETA, the live forecast's budget), so they cannot disagree.

A resume whose earlier sessions already spent the limit trains nothing and says so in one
line, naming the override that lets it go on (``--set train.max_minutes=...``).
"""

from __future__ import annotations

import time


def deadline(max_minutes: float | None, spent_s: float, now: float | None = None) -> float | None:
    """The ``time.monotonic()`` instant at which a run that has spent ``spent_s`` seconds
    (its ``wall_s`` now) reaches ``max_minutes``; None without a limit. May lie in the past."""
    if max_minutes is None:
        return None
    now = time.monotonic() if now is None else now
    return now + 60.0 * max_minutes - spent_s


def spent(max_minutes: float | None, spent_s: float) -> str | None:
    """The line a resume says when earlier sessions spent the whole limit, else None."""
    if max_minutes is None or spent_s < 60.0 * max_minutes:
        return None
    return (f"train.max_minutes={max_minutes:g} is the whole run's limit and its earlier sessions spent "
            f"{spent_s / 60:.1f} minutes (wall_s {spent_s:.0f} s), so nothing more is trained; resume with "
            "--set train.max_minutes=MINUTES (the whole run's, more than that) or train.max_minutes=null to go on.")
