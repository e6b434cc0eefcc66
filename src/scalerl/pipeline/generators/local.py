"""The embedded default backend: generators in separate spawned processes, weights in shared memory.

Topology on one machine (digest §4.3 at toy scale): the main process is the learner (and the
driver: curriculum, queue policy, eval, checkpoints); each generator is a
``torch.multiprocessing`` process (``spawn``) running an :class:`~scalerl.pipeline.generators.actor.Actor`
with ``torch.set_num_threads(threads)``, so on two cores learner and generator overlap.

- each generator has its own inbox (an ``mp.Queue`` of assignment chunks and
  :class:`~scalerl.types.EvalRequest` s), which the driver fills least-loaded first, and its own
  outbox (a pipe, written by a sender thread so decoding never waits for the driver) of
  results, one per inbox item and in its order: groups, an
  :class:`~scalerl.types.EvalResult`, or a failure;
- weights move through :class:`~scalerl.pipeline.weights.SharedWeights` (one flat shared
  tensor + a version counter behind a sequence lock; on a GPU the learner shares, the same
  tensor in GPU memory opened through CUDA IPC), or through a two-rank ``torch.distributed``
  group per generator (``pipeline.collective``), as the plan's ``weights`` says; generators load
  a newer version between decode steps.

Because every generator has its own queues, the driver knows what each one holds (the items
sent and not yet answered), and nothing a dead one leaves behind is shared: not a queue lock
it held, not a half-written message (the driver keeps no copy of an outbox's write end, so a
torn message reads as end of file). A generator found dead (its process sentinel, end of file
on its outbox, or a failure it sent) is replaced (``pipeline.restarts``): a new process with
the same GPU and a fresh seed starts from the newest published weights, and the dead one's
unanswered items are sent again, unchanged (their ``min_version`` is the newest version's
or older). A generator whose parent dies (``kill -9``) notices within a second and exits
without flushing its outbox.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import socket
import threading
import time
import traceback
from collections import deque
from multiprocessing.connection import wait

import torch
import torch.multiprocessing as mp

from scalerl.pipeline.backends import Capabilities
from scalerl.pipeline.generators.actor import ActorSpec, build_actor
from scalerl.pipeline.plan import RunPlan
from scalerl.pipeline.restarts import GeneratorDeaths, describe_exit
from scalerl.pipeline.stop import children_ignore_stop_signals
from scalerl.pipeline.weights import SharedWeights, WeightLayout
from scalerl.types import EvalRequest, EvalResult, Group, PromptAssignment

_SEED_STRIDE = 104729
"""A replacement samples with ``spec.seed + _SEED_STRIDE · restarts``: not the dead one's stream again."""


class _Sender:
    """A generator's end of its outbox: ``put`` returns at once, a thread sends."""

    def __init__(self, conn) -> None:
        self.conn, self.items = conn, queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.items.get()) is not None:
            self.conn.send(item)

    def put(self, item) -> None:
        self.items.put(item)

    def flush(self) -> None:
        self.items.put(None)
        self.thread.join()


def _generator_main(spec: ActorSpec, handle, inbox, outbox, index: int, parent_pid: int,
                    gpu: int | None = None) -> None:
    if gpu is not None:  # before any CUDA call: the engine (vLLM too) sees this GPU as cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    torch.set_num_threads(spec.threads)
    sender = _Sender(outbox)

    def orphaned() -> bool:
        return os.getppid() != parent_pid

    try:
        weights = handle.source()  # the transport's generator end (joins its group, if any)
        actor = build_actor(spec, weights, index, orphaned=orphaned)
        idle, eval_cpu = time.perf_counter(), 0.0
        while True:
            try:
                item = inbox.get(timeout=1.0)
            except queue.Empty:
                if orphaned():
                    break
                continue
            if item is None:
                sender.flush()
                return
            if orphaned():  # a dead learner's backlog (chunks, evaluations) is nobody's work
                break
            if isinstance(item, EvalRequest):
                cpu = time.process_time()
                sender.put(actor.evaluate(item, weights.layout.unflatten))
                eval_cpu += time.process_time() - cpu
                idle = time.perf_counter()  # evaluating is work, not waiting
                continue
            idle = time.perf_counter() - idle  # waiting for work: the learner is the bottleneck
            groups = actor.run_batch(item)
            for g in groups:  # the next groups carry what this role did besides decoding them
                g.times.idle_s, g.times.eval_cpu_s = idle / max(1, len(groups)), eval_cpu / max(1, len(groups))
            sender.put(groups)
            idle, eval_cpu = time.perf_counter(), 0.0
    except BaseException as err:  # noqa: BLE001 - user code's sys.exit too: the driver replaces this role
        if not orphaned():
            last = (traceback.format_exception_only(type(err), err) or [type(err).__name__])[-1].strip()
            sender.put(_Failure(last[:300]))
            sender.flush()
            return
    # Orphaned by a killed learner: nobody reads the outbox, so flushing it would block
    # forever; leave at once.
    os._exit(0)


class _Failure:
    """What a generator sends before it exits on an exception: the exception's last line."""

    def __init__(self, text: str) -> None:
        self.text = text


class _Generator:
    """The driver's handle on one generator process: its queues and the items it holds."""

    def __init__(self, ctx, spec: ActorSpec, weights, index: int, gpu: int | None) -> None:
        self.index, self.inbox = index, ctx.Queue()
        self.outbox, theirs = ctx.Pipe(duplex=False)
        self.held: deque = deque()  # items sent and not yet answered, oldest first
        self.discarded = False
        self.proc = ctx.Process(target=_generator_main, daemon=True, name=f"scalerl-generator-{index}",
                                args=(spec, weights, self.inbox, theirs, index, os.getpid(), gpu))
        with children_ignore_stop_signals():  # Ctrl-C or a scheduler's SIGTERM: the driver stops them
            self.proc.start()
        theirs.close()  # the child's copy is the only write end: its death reads as end of file

    def send(self, item) -> None:
        self.held.append(item)
        self.inbox.put(item)

    def receive(self) -> tuple[list, str | None]:
        """The answers that arrived, and why this generator is dead (None: alive). A process
        that exited uncleanly is not read: a message it was writing may be torn."""
        out: list = []
        if not self.proc.is_alive() and self.proc.exitcode != 0:
            return out, describe_exit(self.proc.exitcode)
        try:
            while self.outbox.poll():
                message = self.outbox.recv()
                if isinstance(message, _Failure):
                    return out, f"failed: {message.text}"
                out.append((self.held.popleft(), message))
        except (EOFError, OSError):
            self.proc.join(timeout=5)
            return out, describe_exit(self.proc.exitcode)
        if not self.proc.is_alive():  # exited cleanly (code 0) without being asked to
            return out, describe_exit(self.proc.exitcode)
        return out, None

    def discard(self) -> None:
        """Forget a dead generator: its process reaped, its queues closed."""
        self.discarded = True
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.inbox.cancel_join_thread()
        self.inbox.close()
        self.outbox.close()


class LocalBackend:
    """``plan.generators`` generator processes + this (learner) process."""

    capabilities = Capabilities(generators="processes", evaluates=True, ranks="processes",
                                weights=("shm", "collective", "cuda_ipc"))

    @classmethod
    def nodes(cls) -> None:
        """This machine alone: no cluster."""
        return None

    def __init__(self, spec: ActorSpec, layout: WeightLayout, plan: RunPlan,
                 deaths: GeneratorDeaths | None = None) -> None:
        """Each generator on its GPU of the plan (``plan.generator_gpus``; none on CPU).
        ``deaths``: when to stop replacing dead generators (default: the first death stops)."""
        self._ctx, self.spec, self.gpus = mp.get_context("spawn"), spec, plan.generator_gpus or None
        self.weights = self._sink(layout, plan)
        self.layout = layout
        self.deaths = deaths or GeneratorDeaths(limit=1, window=1)
        self.generators = [self._start(i) for i in range(plan.generators)]
        self._groups: list[Group] = []
        self._evals: list[EvalResult] = []

    def _sink(self, layout: WeightLayout, plan: RunPlan):
        """The plan's transport: shared memory (on the GPU the roles share, for ``cuda_ipc``) or
        a collective group per generator (on the learner's GPU only when the driver is the learner:
        with ranks in processes of their own the driver holds the weights on the CPU)."""
        if plan.weights == "collective":
            from scalerl.pipeline.collective import CollectiveWeights

            return CollectiveWeights(layout, bucket_bytes=plan.sync_bucket_bytes, timeout_s=plan.sync_timeout_s,
                                     device=plan.device if plan.learner_ranks == 1 else "cpu")
        return SharedWeights(layout, self._ctx, device="cuda" if plan.weights == "cuda_ipc" else "cpu")

    def _start(self, index: int) -> _Generator:
        spec = dataclasses.replace(self.spec, seed=self.spec.seed + _SEED_STRIDE * self.deaths.restarts)
        return _Generator(self._ctx, spec, self.weights.handle(index), index, self.gpus[index] if self.gpus else None)

    @property
    def restarts(self) -> int:
        """Generators replaced so far (``generator_restarts``)."""
        return self.deaths.restarts

    def placement(self) -> list[dict]:
        """Each generator process: this host, its pid, its GPU or CPU threads."""
        host = socket.gethostname()
        return [{"role": f"generator {g.index}", "host": host, "pid": g.proc.pid,
                 "devices": [f"cuda:{self.gpus[g.index]}" if self.gpus else f"cpu ({self.spec.threads} thread(s))"]}
                for g in self.generators]

    @property
    def sink(self):
        return self.weights

    def announce(self, version: int, handle) -> None:
        """Nothing to do: generators poll the shared version counter the write set."""

    def submit(self, chunk: list[PromptAssignment]) -> None:
        self._send(chunk)

    def evaluate(self, request: EvalRequest) -> None:
        """Queue an evaluation on the least-loaded generator (``eval.on=generator``)."""
        self._send(request)

    def _send(self, item) -> None:
        min(self.generators, key=lambda g: len(g.held)).send(item)

    def evaluations(self, timeout: float = 0.0) -> list[EvalResult]:
        """Evaluation results returned so far (waiting up to ``timeout`` s for the first)."""
        self._pump(timeout, lambda: bool(self._evals))
        out, self._evals = self._evals, []
        return out

    def collect(self, timeout: float) -> list[Group]:
        """Groups returned so far (waiting up to ``timeout`` s for the first); a dead
        generator is replaced on the way, or :class:`~scalerl.pipeline.restarts.GeneratorsFailed`
        raised when the window rule says so."""
        self._pump(timeout, lambda: bool(self._groups))
        out, self._groups = self._groups, []
        return out

    def _pump(self, timeout: float, done) -> None:
        """Read every generator's answers until ``done()`` or ``timeout``; replace the dead."""
        deadline = time.monotonic() + timeout
        while True:
            for g in list(self.generators):
                answers, death = g.receive()
                for item, message in answers:
                    (self._evals.append if isinstance(item, EvalRequest) else self._groups.extend)(message)
                if death is not None:
                    self._replace(g, death)
            left = deadline - time.monotonic()
            if done() or left <= 0:
                return
            wait([g.outbox for g in self.generators] + [g.proc.sentinel for g in self.generators], left)

    def _replace(self, dead: _Generator, cause: str) -> None:
        """A new process in ``dead``'s place; its unanswered items go out again."""
        dead.discard()
        self.weights.drop(dead.index)
        self.deaths.died(f"generator {dead.index}", cause)  # raises when the window rule says stop
        print(f"generator {dead.index} {cause}; replaced, {len(dead.held)} unfinished item(s) sent again "
              f"(restart {self.deaths.restarts})", flush=True)
        self.generators[self.generators.index(dead)] = self._start(dead.index)
        for item in dead.held:
            self._send(item)

    def close(self) -> None:
        """Stop the generators promptly: unsent work is dropped, unread answers are drained so
        no generator blocks flushing its outbox at exit."""
        live = [g for g in self.generators if not g.discarded]
        for g in live:
            _drain(g.inbox)
            g.inbox.put(None)
        deadline = time.monotonic() + 10
        while any(g.proc.is_alive() for g in live) and time.monotonic() < deadline:
            for g in live:
                try:
                    while g.outbox.poll():
                        g.outbox.recv()
                except (EOFError, OSError):
                    pass
            time.sleep(0.05)
        for g in live:
            g.discard()  # SIGKILL for one still running: generators ignore SIGTERM (``stop``)
        self.weights.close()


def _drain(q) -> None:
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass
