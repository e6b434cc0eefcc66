"""Evaluation beside training: where it runs, and metrics records written in step order.

The paper validates the policy every ~100 steps (digest §4.3). Run on the learner's own
model, an evaluation stops the learner for as long as it decodes ``num_prompts × k``
completions, and at the recipe's shape the learner is the pipeline's bottleneck. With
``eval.on=generator`` (the default where the backend's generators evaluate,
``backends.Capabilities.evaluates``: ``local``; the run plan decides) the driver instead
snapshots the weights of the version to report (one flat copy), queues an
:class:`~scalerl.types.EvalRequest`, and trains on; a generator evaluates those weights
between chunks and sends an :class:`~scalerl.types.EvalResult` back.

:class:`OrderedRecords` holds each step's record until its evaluation (and every earlier
one) is in, then releases the records in step order, so ``metrics.jsonl``, the live
forecast and the sinks see every step in order, each evaluation on its own step. A
record's compute snapshot is taken when its step ends (before its evaluation, on either
path), and the evaluation's tokens are added to it and to every record after it. The last
step waits for every outstanding evaluation.

Checkpoints carry the backlog (:meth:`OrderedRecords.state_dict`): the held records and, for
each evaluation still out, the weights it evaluates (the snapshot a generator was sent
anyway). A checkpoint is therefore written at its step however far the evaluations lag, and
a resume truncates ``metrics.jsonl`` to the last record logged before it, holds the backlog
again and re-submits its evaluations: no step is lost or logged twice. (Checkpoints used to
wait for the log to reach their step; with evaluations lagging more than
``train.checkpoint_every`` steps each pending one was superseded before it was written, and
the newest checkpoint stayed at step 3 while the log reached step 36.)

Role-time fields: ``learner_eval_s`` (what the evaluation cost the learner: the whole
evaluation inline, one weight copy on a generator) and ``eval_s`` (the evaluation's own
wall time on the role that ran it).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from typing import Any

from scalerl.runfolder import LEARNER_EVAL, current_names
from scalerl.types import EvalRequest, EvalResult

EVAL_ON = ("auto", "generator", "learner")
"""Where evaluations run (``eval.on``); ``auto`` is ``generator`` on backends that can."""


class LearnerEvaluation:
    """Evaluate at once on the learner's model (blocks the learner)."""

    def __init__(self, evaluators: list, stop=None, log=print) -> None:
        """``stop()``: whether a stop was requested, checked between decode steps and user calls."""
        self.evaluators, self._done, self.stop, self.log = evaluators, [], stop, log

    def submit(self, step: int, version: int, model) -> None:
        """Evaluate now; no weight snapshot is kept (the result is in before any checkpoint).
        A stop requested meanwhile abandons it: the step's record has no evaluation metrics."""
        from scalerl.eval import evaluate
        from scalerl.rollout.trajectory import RolloutStopped
        from scalerl.user_code import abandon_when

        start = time.perf_counter()
        try:
            with abandon_when(self.stop):  # a hung reward or environment does not hold the stop up
                self._done.append(evaluate(self.evaluators, step, version, self.stop))
        except RolloutStopped:
            self.log(f"the evaluation of step {step} was abandoned for the stop; its record has no evaluation "
                     "metrics.")
            self._done.append(EvalResult(step, version, {}, 0, time.perf_counter() - start, os.getpid(), ()))

    def resubmit(self, step: int, version: int, weights) -> None:
        from scalerl.config import ConfigError

        raise ConfigError(f"the checkpoint holds the evaluation of step {step} still to be done on a "
                          "generator; resume with eval.on=generator (the setting it was written with).")

    def results(self, timeout: float = 0.0) -> list[EvalResult]:
        out, self._done = self._done, []
        return out


class GeneratorEvaluation:
    """Evaluate on a generator of an :class:`~scalerl.pipeline.backends.EvaluatingBackend`,
    with a snapshot of the weights."""

    def __init__(self, backend) -> None:
        self.backend, self.layout = backend, backend.layout

    def submit(self, step: int, version: int, model):
        """Queue the evaluation; returns the weight snapshot sent, which a checkpoint keeps
        until the result is in."""
        # on the CPU: a CUDA tensor would cross processes by CUDA IPC and pin learner memory
        weights = self.layout.flatten(model).cpu()
        self.resubmit(step, version, weights)
        return weights

    def resubmit(self, step: int, version: int, weights) -> None:
        """Queue the evaluation of a snapshot (a resumed checkpoint's backlog)."""
        self.backend.evaluate(EvalRequest(step, version, weights))

    def results(self, timeout: float = 0.0) -> list[EvalResult]:
        return self.backend.evaluations(timeout)


def make_evaluation(generator: bool, backend, evaluators: Callable[[], list], stop=None, log=print):
    """On a generator of ``backend``, or on the learner (``evaluators`` builds its evaluators;
    ``stop()`` abandons one under way)."""
    return GeneratorEvaluation(backend) if generator else LearnerEvaluation(evaluators(), stop, log)


class OrderedRecords:
    """Step records held until their evaluation is in, released in step order (module doc)."""

    def __init__(self, evaluation, compute) -> None:
        self.evaluation, self.compute = evaluation, compute
        self.held: list[dict[str, Any]] = []
        self.waiting: set[int] = set()
        self.snapshots: dict[int, tuple[int, Any]] = {}  # step -> (version, weights) of those out

    def add(self, record: dict[str, Any], evaluate: bool = False, model=None, version: int = 0,
            learner=None) -> None:
        """Hold ``record`` (it already carries its compute snapshot); with ``evaluate``,
        start the evaluation of ``model`` as policy ``version`` — or of ``learner``'s
        current weights (``eval_snapshot``, gathered from its ranks only now) and version."""
        self.held.append(record)
        if evaluate:
            start = time.perf_counter()
            if learner is not None:
                model, version = learner.eval_snapshot(), learner.version
            self.waiting.add(record["step"])
            weights = self.evaluation.submit(record["step"], version, model)
            if weights is not None:
                self.snapshots[record["step"]] = (version, weights)
            record[LEARNER_EVAL] = time.perf_counter() - start

    def logged_through(self, step: int) -> bool:
        """Whether every record up to ``step`` has been released."""
        return not self.held or self.held[0]["step"] > step

    def logged_until(self, step: int) -> int:
        """The last step released to the log when ``step`` is the newest record added."""
        return self.held[0]["step"] - 1 if self.held else step

    def state_dict(self) -> dict[str, Any]:
        """The backlog a checkpoint needs: the held records and, for every evaluation still
        out, ``(step, version, weights)`` to submit again on resume."""
        for result in self.evaluation.results():  # in but not absorbed (inline ones always are)
            self._absorb(result)
        return {"held": copy.deepcopy(self.held),
                "evaluations": [(s, *self.snapshots[s]) for s in sorted(self.waiting)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Hold a checkpoint's backlog again and re-submit its evaluations."""
        # a checkpoint written before metric keys were renamed holds them under their old names
        self.held = [current_names(r) for r in copy.deepcopy(list(state["held"]))]
        for step, version, weights in state["evaluations"]:
            self.waiting.add(step)
            self.snapshots[step] = (version, weights)
            self.evaluation.resubmit(step, version, weights)

    @property
    def pending(self) -> int:
        """Evaluations started and not yet back."""
        return len(self.waiting)

    def ready(self, timeout: float = 0.0) -> list[dict[str, Any]]:
        """Records whose evaluations (and all earlier ones) are in, oldest first."""
        for result in self.evaluation.results(timeout):
            self._absorb(result)
        out = []
        while self.held and self.held[0]["step"] not in self.waiting:
            out.append(self.held.pop(0))
        return out

    def drain(self, pump: Callable[[], None], until: float | None = None) -> list[dict[str, Any]]:
        """Wait for every outstanding evaluation (``pump`` keeps the other traffic moving
        and raises a failed role's error), then release everything held; with ``until`` (a
        ``time.monotonic()`` deadline: a stop) only until then, the rest staying held."""
        out = self.ready()
        while self.waiting and (until is None or time.monotonic() < until):
            pump()
            out += self.ready(timeout=0.2)
        return out

    def _absorb(self, result: EvalResult) -> None:
        record = next(r for r in self.held if r["step"] == result.step)
        record.update(result.metrics, eval_s=result.seconds)
        if result.samples:
            record["samples"] = list(result.samples)
        self.compute.add_generation(result.tokens)
        flops = 2.0 * self.compute.n_params * result.tokens
        for later in self.held:  # their snapshots were taken before these tokens were counted
            if later["step"] >= result.step and "total_gen_tokens" in later:
                later["total_gen_tokens"] += result.tokens
                later["flops"] += flops
        self.waiting.discard(result.step)
        self.snapshots.pop(result.step, None)
