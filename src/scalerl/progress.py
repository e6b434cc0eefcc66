"""The run's progress on the console: rich's live bar on a terminal, plain lines in a log.

A live bar redraws one line in place; with stdout a file (a batch job, ``nohup``, ``> log``)
rich draws nothing until the end and then one line cut at 80 columns. There the progress is
:class:`ProgressLines`: one whole line (``print(..., flush=True)``, never cut) when a record
arrives and ``log.progress_every_s`` have passed since the last line, the same line again
with how long no step came when that much time passes without one (a stalled job says so),
and the last state when the run ends. :func:`progress_sink` picks one by rich's terminal
detection.

The line: step, train reward of the step (with several reward functions, ``task.reward_fns``,
each one's mean beside it, from the record's ``reward/<NAME>``, as TRL shows
``rewards/<NAME>/mean``), the latest validation pass rate and its step, the
pace in steps per minute over this session's logged steps (their ``wall_s``, so records
released together after a lagging evaluation do not look like a burst), generated tokens per
second (``gen_tokens_per_s``), elapsed time, the ETA at that pace (capped by
``train.max_minutes``, and then said so) and the live forecast when there is one.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from scalerl.runfolder import Forecast


class ProgressBar:
    """A rich progress bar: step, train reward, last validation pass rate, ETA."""

    def __init__(self, total: int, start: int, name: str) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn(f"[bold]{name}[/] step {{task.completed}}/{{task.total}}"),
            BarColumn(bar_width=10),
            TextColumn("reward {task.fields[reward]}  val {task.fields[val]}  {task.fields[forecast]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        self.task = self.progress.add_task("train", total=total, completed=start, reward="-", val="-",
                                           forecast="")
        self.progress.start()

    def write(self, record: dict[str, Any]) -> None:
        fields: dict[str, Any] = {"completed": int(record["step"])}
        if _finite(record.get("reward_mean")):
            fields["reward"] = reward_text(record)
        if _finite(record.get("val_pass_rate")):
            fields["val"] = f"{record['val_pass_rate']:.3f}"
        if record.get(Forecast.STATE) is not None:
            fields["forecast"] = forecast_text(record)
        self.progress.update(self.task, **fields)

    def close(self) -> None:
        self.progress.stop()


def reward_text(record: dict[str, Any]) -> str:
    """The step's reward, and each reward function's mean when there are several:
    ``+0.106 (correctness 0.062, format_reward 0.500)``."""
    parts = [f"{name} {value:.3f}" for name, value in reward_parts(record)]
    return f"{record['reward_mean']:+.3f}" + (f" ({', '.join(parts)})" if len(parts) > 1 else "")


def reward_parts(record: dict[str, Any]) -> list[tuple[str, float]]:
    """Each reward function's mean in the record, ``reward/<NAME>`` (not its ``_std``), in order."""
    keys = [k for k in record if k.startswith("reward/")]
    return [(k.removeprefix("reward/"), record[k]) for k in keys
            if not (k.endswith("_std") and k.removesuffix("_std") in keys) and _finite(record[k])]


def forecast_text(record: dict[str, Any]) -> str:
    """The live forecast in a few characters: A with its interval ("?" when the ceiling is
    not identified) and the forecast at the run's own budget (its interval is in the record);
    a run that is not rising, its state."""
    state = record.get(Forecast.STATE)
    parts = [] if state == "rising" else [str(state).replace("_", " ")]
    if record.get(Forecast.A) is not None:
        mark = "" if record.get(Forecast.IDENTIFIED) else "?"
        parts.append(f"A {record[Forecast.A]:.2f}{mark} [{record[Forecast.A_LO]:.2f}-{record[Forecast.A_HI]:.2f}]")
    if _finite(record.get(Forecast.FINAL)):
        parts.append(f"end {record[Forecast.FINAL]:.2f}")
    return " ".join(parts)


def duration(seconds: float) -> str:
    """``45s``, ``3m52s``, ``2h05m``: whole units, the two largest."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class ProgressState:
    """What the progress line says, from the records seen so far (module doc)."""

    def __init__(self, total: int, start: int, name: str, now: float) -> None:
        self.total, self.step, self.name = total, start, name
        self.started = self.last_record = now
        self.deadline: float | None = None  # the clock's time at which train.max_minutes ends the run
        self.first: tuple[int, float] | None = None  # (step, wall_s) of this session's first step
        self.latest: dict[str, Any] = {}
        self.val: tuple[float, int] | None = None
        self.forecast = ""

    def update(self, record: dict[str, Any], now: float) -> None:
        self.step, self.last_record, self.latest = int(record["step"]), now, record
        if self.first is None and self.step > 0 and _finite(record.get("wall_s")):
            self.first = (self.step, float(record["wall_s"]))
        if _finite(record.get("val_pass_rate")):
            self.val = (record["val_pass_rate"], self.step)
        if record.get(Forecast.STATE) is not None:
            self.forecast = forecast_text(record)

    def steps_per_s(self) -> float | None:
        """Logged steps per second of step wall time since this session's first step."""
        wall = self.latest.get("wall_s")
        if self.first is None or not _finite(wall) or self.step <= self.first[0] or wall <= self.first[1]:
            return None
        return (self.step - self.first[0]) / (wall - self.first[1])

    def eta(self, now: float) -> str:
        """Seconds left at the pace so far, or to ``train.max_minutes`` when that comes first."""
        pace = self.steps_per_s()
        by_steps = (self.total - self.step) / pace if pace else math.inf
        by_limit = self.deadline - now if self.deadline is not None else math.inf
        if math.isinf(by_steps) and math.isinf(by_limit):
            return "ETA ?"
        return f"ETA {duration(min(by_steps, by_limit))}" + (" (train.max_minutes)" if by_limit < by_steps else "")

    def line(self, now: float) -> str:
        r = self.latest
        parts = [f"{self.name}: step {self.step}/{self.total}"]
        if _finite(r.get("reward_mean")):
            parts.append(f"reward {reward_text(r)}")
        if self.val is not None:
            parts.append(f"val {self.val[0]:.3f} (step {self.val[1]})")
        pace = self.steps_per_s()
        if pace:
            parts.append(f"{60 * pace:.1f} steps/min")
        if _finite(r.get("gen_tokens_per_s")):
            parts.append(f"gen {r['gen_tokens_per_s']:.0f} tok/s")
        parts += [f"elapsed {duration(now - self.started)}", self.eta(now)]
        if self.forecast:
            parts.append(f"forecast {self.forecast}")
        if not r:
            parts.append("(no step logged yet)")
        return "  ".join(parts)


class ProgressLines:
    """Plain progress lines for a log file (module doc): on a record at most every ``every_s``
    seconds, from a ticker thread when none came for ``every_s`` seconds, and at close.

    ``clock`` (default ``time.monotonic``, the clock of the run's deadline) and ``emit``
    (default ``print(..., flush=True)``) are parameters so a test can drive the schedule with
    a fake clock; ``ticker=False`` starts no thread (the test calls :meth:`tick`)."""

    def __init__(self, total: int, start: int, name: str, every_s: float, *,
                 clock: Callable[[], float] = time.monotonic, emit: Callable[[str], None] | None = None,
                 ticker: bool = True) -> None:
        self.every_s, self.clock = every_s, clock
        self.emit = emit or (lambda line: print(line, flush=True))
        self.state = ProgressState(total, start, name, clock())
        self.printed: float | None = None  # when the last line was printed
        self.shown = True  # the last line printed shows the latest record
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if ticker and every_s > 0:
            self._thread = threading.Thread(target=self._tick_until_closed, name="progress", daemon=True)
            self._thread.start()

    def due(self, now: float) -> bool:
        """Whether ``every_s`` seconds have passed since the last line (or none was printed)."""
        return self.printed is None or now - self.printed >= self.every_s

    def set_deadline(self, deadline: float | None) -> None:
        """When (on ``clock``) ``train.max_minutes`` ends the run; None: no time limit."""
        self.state.deadline = deadline

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            now = self.clock()
            self.state.update(record, now)
            self.shown = False
            if self.due(now):
                self._print(now, stale=False)

    def tick(self) -> None:
        """The ticker's turn: print when ``every_s`` seconds passed without a line, saying for
        how long no step came when the line shows nothing new."""
        with self._lock:
            now = self.clock()
            if self.due(now):
                self._print(now, stale=self.shown)

    def _print(self, now: float, stale: bool) -> None:
        line = self.state.line(now)
        if stale and self.state.latest:
            line += f"  (no new step for {duration(now - self.state.last_record)})"
        self.emit(line)
        self.printed, self.shown = now, True

    def _tick_until_closed(self) -> None:
        while not self._stop.wait(self.every_s):
            self.tick()

    def close(self) -> None:
        """Stop the ticker; print the latest state unless the last line showed it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if not self.shown:
                self._print(self.clock(), stale=False)


def progress_sink(total: int, start: int, name: str, every_s: float, terminal: bool | None = None):
    """Rich's live bar when stdout is a terminal (or a notebook), else :class:`ProgressLines`;
    ``terminal`` overrides rich's detection."""
    if terminal is None:
        from rich.console import Console

        console = Console()
        terminal = console.is_terminal or console.is_jupyter
    return ProgressBar(total, start, name) if terminal else ProgressLines(total, start, name, every_s)
