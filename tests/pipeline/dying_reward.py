"""A reward function that ``kill -9``s the generator calling it, for the restart tests.

:func:`write` copies it into a test's folder with its settings filled in: calls made in a
generator (a spawned ``local`` process or a Ray actor, never the driver) are numbered across
every process through a locked counter file, and the generator making call ``n`` sends
itself SIGKILL when ``first <= n < stop``. Numbering, not timing, decides who dies.
"""

from __future__ import annotations

from pathlib import Path

_TEMPLATE = '''
import fcntl
import multiprocessing
import os
import signal
import sys

COUNTER, FIRST, STOP = {counter!r}, {first}, {stop}


def _in_a_generator():
    if multiprocessing.parent_process() is not None:  # a spawned local generator
        return True
    if "ray" in sys.modules:  # a Ray actor, not the driver
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    return False


def reward(completion, **fields):
    if _in_a_generator():
        with open(COUNTER, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            n = len(f.read()) + 1
            f.write("x")
            f.flush()
        if FIRST <= n < STOP:
            os.kill(os.getpid(), signal.SIGKILL)
    return float(str(fields.get("answer")) in completion)
'''


def write(folder: Path, first: int, stop: float = float("inf")) -> str:
    """The ``task.reward_fn`` spec of a copy in ``folder`` killing calls ``first`` .. ``stop - 1``."""
    path = Path(folder) / "dying_reward.py"
    stop_text = "float('inf')" if stop == float("inf") else str(int(stop))
    path.write_text(_TEMPLATE.format(counter=str(Path(folder) / "calls"), first=first, stop=stop_text))
    return f"{path}:reward"


def calls(folder: Path) -> int:
    """Generator calls made so far."""
    counter = Path(folder) / "calls"
    return len(counter.read_text()) if counter.exists() else 0
