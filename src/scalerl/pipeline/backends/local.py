"""The embedded default backend: generators in separate spawned processes, weights in shared memory.

Topology on one machine (digest §4.3 at toy scale): the main process is the learner (and the
driver: curriculum, queue policy, eval, checkpoints); each generator is a
``torch.multiprocessing`` process (``spawn``) running an :class:`~scalerl.pipeline.actor.Actor`
with ``torch.set_num_threads(threads)``, so on two cores learner and generator overlap.

- prompts go out through an ``mp.Queue`` of assignment chunks;
- finished groups come back through another ``mp.Queue``;
- weights move through :class:`~scalerl.pipeline.weights.SharedWeights` (one flat shared
  tensor + a version counter under a lock), read by generators between decode steps;
- evaluations (``eval.on=generator``): an :class:`~scalerl.types.EvalRequest` rides the
  assignment queue, whichever generator takes it evaluates, and the
  :class:`~scalerl.types.EvalResult` comes back on its own queue, so polling for results
  never consumes groups.

A generator whose parent dies (``kill -9``) notices within a second and exits without
flushing its queue; a generator that
fails sends its traceback back, and the learner raises it.
"""

from __future__ import annotations

import os
import queue
import time
import traceback

import torch
import torch.multiprocessing as mp

from scalerl.pipeline.actor import ActorSpec, build_actor
from scalerl.pipeline.stop import children_ignore_stop_signals
from scalerl.pipeline.weights import SharedWeights
from scalerl.types import EvalRequest, EvalResult, Group, PromptAssignment


class _Failure:
    def __init__(self, text: str) -> None:
        self.text = text


def _generator_main(spec: ActorSpec, weights: SharedWeights, assign_q, group_q, eval_q, index: int,
                    parent_pid: int, gpu: int | None = None) -> None:
    if gpu is not None:  # before any CUDA call: the engine (vLLM too) sees this GPU as cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    torch.set_num_threads(spec.threads)

    def orphaned() -> bool:
        return os.getppid() != parent_pid

    try:
        actor = build_actor(spec, weights, index, orphaned=orphaned)
        idle, eval_cpu = time.perf_counter(), 0.0
        while True:
            try:
                chunk = assign_q.get(timeout=1.0)
            except queue.Empty:
                if orphaned():
                    break
                continue
            if chunk is None:
                return
            if orphaned():  # a dead learner's backlog (chunks, evaluations) is nobody's work
                break
            if isinstance(chunk, EvalRequest):
                cpu = time.process_time()
                eval_q.put(actor.evaluate(chunk, weights.layout.unflatten))
                eval_cpu += time.process_time() - cpu
                idle = time.perf_counter()  # evaluating is work, not waiting
                continue
            idle = time.perf_counter() - idle  # waiting for work: the learner is the bottleneck
            groups = actor.run_batch(chunk)
            for g in groups:  # the next groups carry what this role did besides decoding them
                g.times.idle_s, g.times.eval_cpu_s = idle / max(1, len(groups)), eval_cpu / max(1, len(groups))
            group_q.put(groups)
            idle, eval_cpu = time.perf_counter(), 0.0
    except Exception:  # noqa: BLE001 - any failure must reach the learner, not die silently
        if not orphaned():
            group_q.put(_Failure(f"generator {index} failed:\n{traceback.format_exc()}"))
            return
    # Orphaned by a killed learner: nobody reads the queue, so flushing it at exit would block
    # forever; leave at once.
    os._exit(0)


class LocalBackend:
    """``num_generators`` generator processes + this (learner) process."""

    def __init__(self, spec: ActorSpec, model: torch.nn.Module, num_generators: int = 1,
                 gpus: tuple[int, ...] | None = None) -> None:
        """``gpus``: the physical GPU of each generator (``pipeline.placement``); None on CPU."""
        ctx = mp.get_context("spawn")
        self.weights = SharedWeights(model, ctx)
        self.assign_q, self.group_q, self.eval_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
        self.procs = [
            ctx.Process(target=_generator_main, daemon=True, name=f"scalerl-generator-{i}",
                        args=(spec, self.weights, self.assign_q, self.group_q, self.eval_q, i, os.getpid(),
                              gpus[i] if gpus else None))
            for i in range(num_generators)
        ]
        with children_ignore_stop_signals():  # Ctrl-C or a scheduler's SIGTERM: the driver stops them
            for proc in self.procs:
                proc.start()

    @property
    def num_devices(self) -> int:
        return 1 + len(self.procs)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        self.weights.publish(model, version)

    @property
    def sink(self) -> SharedWeights:
        return self.weights

    def announce(self, version: int, handle) -> None:
        """Nothing to do: generators poll the shared version counter the write set."""

    def submit(self, chunk: list[PromptAssignment]) -> None:
        self.assign_q.put(chunk)

    def evaluate(self, request: EvalRequest) -> None:
        """Queue an evaluation for the next free generator (``eval.on=generator``)."""
        self.assign_q.put(request)

    def evaluations(self, timeout: float = 0.0) -> list[EvalResult]:
        """Evaluation results returned so far (waiting up to ``timeout`` s for the first)."""
        out: list[EvalResult] = []
        try:
            out.append(self.eval_q.get(timeout=timeout) if timeout > 0 else self.eval_q.get_nowait())
            while True:
                out.append(self.eval_q.get_nowait())
        except queue.Empty:
            pass
        return out

    def collect(self, timeout: float) -> list[Group]:
        """Groups returned so far (waiting up to ``timeout`` s for the first)."""
        out: list[Group] = []
        try:
            out.extend(self._unwrap(self.group_q.get(timeout=timeout)))
            while True:
                out.extend(self._unwrap(self.group_q.get_nowait()))
        except queue.Empty:
            pass
        if not out:
            dead = [p.name for p in self.procs if not p.is_alive()]
            if dead:
                raise RuntimeError(f"generator process(es) {', '.join(dead)} exited unexpectedly")
        return out

    @staticmethod
    def _unwrap(message) -> list[Group]:
        if isinstance(message, _Failure):
            raise RuntimeError(message.text)
        return message

    def close(self) -> None:
        """Stop the generators promptly: unsent work is dropped, unread groups are drained so
        no generator blocks flushing its queue at exit."""
        _drain(self.assign_q)
        for _ in self.procs:
            self.assign_q.put(None)
        deadline = time.monotonic() + 10
        while any(p.is_alive() for p in self.procs) and time.monotonic() < deadline:
            _drain(self.group_q)
            _drain(self.eval_q)
            time.sleep(0.05)
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()  # SIGTERM is ignored by generators (``stop.children_ignore_stop_signals``)
            proc.join(timeout=5)
        for q in (self.assign_q, self.group_q, self.eval_q):
            q.cancel_join_thread()


def _drain(q) -> None:
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass
