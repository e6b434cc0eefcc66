"""Evaluation beside training: where it runs, and metrics records written in step order.

The paper validates the policy every ~100 steps (digest §4.3). Run on the learner's own
model, an evaluation stops the learner for as long as it decodes ``num_prompts × k``
completions, and at the recipe's shape the learner is the pipeline's bottleneck. With
``eval.on=generator`` (the default where the backend can, ``local``) the driver instead
snapshots the weights of the version to report (one flat copy), queues an
:class:`~scalerl.types.EvalRequest`, and trains on; a generator evaluates those weights
between chunks and sends an :class:`~scalerl.types.EvalResult` back.

:class:`OrderedRecords` holds each step's record until its evaluation (and every earlier
one) is in, then releases the records in step order, so ``metrics.jsonl``, the live
forecast and the sinks see every step in order, each evaluation on its own step. A
record's compute snapshot is taken when its step ends (before its evaluation, on either
path), and the evaluation's tokens are added to it and to every record after it. The last
step waits for every outstanding evaluation; a periodic checkpoint is copied at its step and
written once the log has reached it (``pipeline.run.DeferredCheckpoints``), so the log and
the checkpoint agree on resume and the learner does not wait.

Role-time fields: ``learner_eval_s`` (what the evaluation cost the learner: the whole
evaluation inline, one weight copy on a generator) and ``eval_s`` (the evaluation's own
wall time on the role that ran it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from scalerl.types import EvalRequest, EvalResult

EVAL_ON = ("auto", "generator", "learner")
"""Where evaluations run (``eval.on``); ``auto`` is ``generator`` on backends that can."""


class LearnerEvaluation:
    """Evaluate at once on the learner's model (blocks the learner)."""

    def __init__(self, evaluators: list) -> None:
        self.evaluators, self._done = evaluators, []

    def submit(self, step: int, version: int, model) -> None:
        from scalerl.eval import evaluate

        self._done.append(evaluate(self.evaluators, step, version))

    def results(self, timeout: float = 0.0) -> list[EvalResult]:
        out, self._done = self._done, []
        return out


class GeneratorEvaluation:
    """Evaluate on a generator of the ``local`` backend, with a snapshot of the weights."""

    def __init__(self, backend) -> None:
        self.backend, self.layout = backend, backend.weights.layout

    def submit(self, step: int, version: int, model) -> None:
        # on the CPU: a CUDA tensor would cross processes by CUDA IPC and pin learner memory
        self.backend.evaluate(EvalRequest(step, version, self.layout.flatten(model).cpu()))

    def results(self, timeout: float = 0.0) -> list[EvalResult]:
        return self.backend.evaluations(timeout)


def on_generator(where: str, backend: str) -> bool:
    """Whether ``eval.on`` puts evaluations on a generator with this backend."""
    return where == "generator" or (where == "auto" and backend == "local")


def make_evaluation(generator: bool, backend, evaluators: Callable[[], list]):
    """On a generator of ``backend``, or on the learner (``evaluators`` builds its evaluators)."""
    return GeneratorEvaluation(backend) if generator else LearnerEvaluation(evaluators())


class OrderedRecords:
    """Step records held until their evaluation is in, released in step order (module doc)."""

    def __init__(self, evaluation, compute) -> None:
        self.evaluation, self.compute = evaluation, compute
        self.held: list[dict[str, Any]] = []
        self.waiting: set[int] = set()

    def add(self, record: dict[str, Any], evaluate: bool = False, model=None, version: int = 0) -> None:
        """Hold ``record`` (it already carries its compute snapshot); with ``evaluate``,
        start the evaluation of ``model`` as policy ``version``."""
        self.held.append(record)
        if evaluate:
            start = time.perf_counter()
            self.waiting.add(record["step"])
            self.evaluation.submit(record["step"], version, model)
            record["learner_eval_s"] = time.perf_counter() - start

    def logged_through(self, step: int) -> bool:
        """Whether every record up to ``step`` has been released."""
        return not self.held or self.held[0]["step"] > step

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

    def drain(self, pump: Callable[[], None]) -> list[dict[str, Any]]:
        """Wait for every outstanding evaluation (``pump`` keeps the other traffic moving
        and raises a failed role's error), then release everything held."""
        out = self.ready()
        while self.waiting:
            pump()
            out += self.ready(timeout=0.2)
        return out

    def _absorb(self, result: EvalResult) -> None:
        record = next(r for r in self.held if r["step"] == result.step)
        record.update(result.metrics, eval_s=result.seconds)
        self.compute.add_generation(result.tokens)
        flops = 2.0 * self.compute.n_params * result.tokens
        for later in self.held:  # their snapshots were taken before these tokens were counted
            if later["step"] >= result.step and "gen_tokens" in later:
                later["gen_tokens"] += result.tokens
                later["flops"] += flops
        self.waiting.discard(result.step)
