"""Dead generators are replaced; dead learner ranks stop the run. Both end in one sentence.

A generator role holds no state the run needs: its in-flight prompts are known to the
backend that sent them, and the weights it samples with are the newest published version.
So a backend that finds one dead (``kill -9``, ``os._exit`` in a user's reward function or
environment, an exception it could not survive) starts a replacement from the newest
published weights, sends it the dead one's unreturned work, and goes on; the driver logs
the count as ``generator_restarts``. :class:`GeneratorDeaths` is the rule that stops
replacing: ``pipeline.generator_deaths`` deaths within ``pipeline.generator_death_window``
learner steps (a generator that dies again and again on the same prompt would otherwise
loop forever) raise :class:`GeneratorsFailed`.

A learner rank holds a shard of the model and optimiser, which no replacement could
rebuild mid-run, so its death stops the run (``learner.rank.RankFailed``).

A role whose cluster node left (``ray``) is not replaced elsewhere behind the plan's back:
:class:`NodeLost` names the node and stops the run; a resume plans again for the nodes left.

Either way ``scalerl train`` prints one sentence, made by :func:`failure_sentence`, which
says whether a checkpoint exists to continue from; the exit status is 1.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path


class GeneratorsFailed(RuntimeError):
    """Generators died too often (:class:`GeneratorDeaths`); ``str()`` names the cause."""


class NodeLost(RuntimeError):
    """A cluster node that ran a role left the cluster; ``str()`` names the node and the role."""


def describe_exit(code: int | None) -> str:
    """A process's exit status in words: ``killed by SIGKILL``, ``exited with code 3``."""
    if code is None:
        return "vanished"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class GeneratorDeaths:
    """The window rule: the run stops when ``limit`` generator deaths fall within ``window``
    learner steps; every death before that is a restart. ``clock`` reads the learner's step
    (its policy version, which advances once per step)."""

    def __init__(self, limit: int, window: int, clock: Callable[[], int] = lambda: 0) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self.restarts = 0
        self._recent: list[int] = []  # the steps of the deaths still inside the window

    def died(self, who: str, cause: str) -> None:
        """Count a death of ``who`` (``generator 0``); :class:`GeneratorsFailed` when it is
        the ``limit``-th within the window, else it counts as a restart."""
        now = self.clock()
        self._recent = [s for s in self._recent if now - s < self.window] + [now]
        if len(self._recent) >= self.limit:
            times = "once" if self.limit == 1 else f"{self.limit} times"
            raise GeneratorsFailed(f"generators died {times} within {self.window} steps (pipeline.generator_deaths="
                                   f"{self.limit}, pipeline.generator_death_window={self.window}); the last, "
                                   f"{who}, {cause}")
        self.restarts += 1


def checkpoint_step(run_dir: Path) -> int | None:
    """The step of the newest checkpoint in ``run_dir`` that has both its files, or None."""
    from scalerl.checkpoint import latest_checkpoint

    path = latest_checkpoint(Path(run_dir))
    if path is None:
        return None
    try:
        step = json.loads((path / "meta.json").read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


def failure_sentence(cause: object, run_dir: Path) -> str:
    """``cause`` and whether a checkpoint exists to continue from, as one sentence."""
    text = str(cause).strip().rstrip(".")
    step = checkpoint_step(run_dir)
    if step is None:
        return f"{text}; no checkpoint was written before this, so the run starts over."
    return (f"{text}; the newest checkpoint (step {step}) is in {run_dir}: continue with "
            f"`scalerl train --resume {run_dir}`.")
