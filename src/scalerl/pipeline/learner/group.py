"""The driver's handle on a data-parallel learner: ``learner.world_size`` ranks elsewhere.

:class:`ShardedLearner` is a :class:`~scalerl.pipeline.learner.role.LearnerRole`. Each call goes
to every rank (:class:`~scalerl.pipeline.learner.rank.LearnerRank`) and waits for all of
them; ranks run as spawned local processes (``local`` and ``inprocess`` backends) or as Ray
actors in a placement group (``ray``), one transport interface for both:

- ``step``: every rank trains its rows; the driver merges their
  :class:`~scalerl.pipeline.learner.train_step.StepPart`\\ s into the step's metrics, plus
  ``learner_rank_busy_s_max``/``_min``.
- ``publish``: every rank gathers bucket after bucket; rank 0 writes them into the backend's
  sink. The sync has ``learner.sync_timeout_s``: when it runs out, :class:`SyncTimeout` names
  the rank that got least far and the bucket it stalled at (a failed sync never hangs the run
  silently, trl#6796).
- ``eval_snapshot``: the driver's CPU copy of the model, refreshed from the ranks' full state
  once per version it is asked for.
"""

from __future__ import annotations

import socket
import time
import traceback
from typing import Any

import torch

from scalerl.pipeline.learner.rank import LearnerRank, RankFailed, RankSpec, SyncTimeout
from scalerl.pipeline.learner.role import Published, StepResult, rate_metrics
from scalerl.pipeline.learner.train_step import step_metrics
from scalerl.pipeline.restarts import describe_exit
from scalerl.pipeline.stop import children_ignore_stop_signals
from scalerl.runfolder import LEARNER_BUSY, LEARNER_WORLD_SIZE


def _last_line(text: str) -> str:
    """A traceback's exception line, cut to 200 characters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()] or ["an error"]
    return lines[-1] if len(lines[-1]) <= 200 else lines[-1][:197] + "..."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(spec: RankSpec, rank: int, sink, conn, progress) -> None:
    """A local rank process: serve the driver's calls until told to stop."""
    try:
        if spec.device == "cuda":
            torch.cuda.set_device(rank)  # one GPU per rank on this machine
        worker = LearnerRank(spec, rank, sink, progress)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        method, args = conn.recv()
        if method is None:
            worker.close()
            return
        try:
            result = getattr(worker, method)(*args)
            conn.send(("ok", result))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


class _ProcessRanks:
    """Ranks as spawned processes on this machine, each answering over a pipe."""

    def __init__(self, spec: RankSpec, sink) -> None:
        ctx = torch.multiprocessing.get_context("spawn")
        self.device = spec.device
        self.progress = ctx.Array("q", spec.world, lock=False)  # LearnerRank.sync_progress, per rank
        self.conns, self.procs = [], []
        for rank in range(spec.world):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_rank_main, args=(spec, rank, sink if rank == 0 else None, theirs, self.progress),
                               daemon=True, name=f"scalerl-learner-{rank}")
            with children_ignore_stop_signals():  # the driver finishes the step and stops them
                proc.start()
            self.conns.append(mine)
            self.procs.append(proc)
        self.gather(timeout=None)  # each rank built its model and joined the group

    def call(self, method: str, *args) -> None:
        for rank, conn in enumerate(self.conns):
            try:
                conn.send((method, args))
            except OSError:  # its end of the pipe is gone: the rank died
                raise self._dead_rank(rank) from None

    def gather(self, timeout: float | None) -> list[Any]:
        """Every rank's reply; :class:`RankFailed` naming the rank that died or raised
        (the dead one first: its peers' errors are only the echo of its death)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Any] = [None] * len(self.conns)
        waiting = set(range(len(self.conns)))
        while waiting:
            for rank in sorted(waiting):
                if self.conns[rank].poll(0.05):
                    try:
                        status, value = self.conns[rank].recv()
                    except (EOFError, OSError):  # end of file: the rank's process is gone
                        raise self._dead_rank(rank) from None
                    if status == "error":
                        raise self._dead_rank(None) or RankFailed(f"learner rank {rank} failed: {_last_line(value)}")
                    out[rank] = value
                    waiting.discard(rank)
                elif not self.procs[rank].is_alive():
                    raise self._dead_rank(rank)
            if deadline is not None and time.monotonic() > deadline and waiting:
                raise TimeoutError(sorted(waiting))
        return out

    def _dead_rank(self, rank: int | None, grace: float = 2.0) -> RankFailed | None:
        """The failure of the first rank whose process has exited (``rank``'s, which is
        known to be dying, once it has); None when every rank lives after ``grace`` s."""
        deadline = time.monotonic() + grace
        while True:
            dead = [r for r, p in enumerate(self.procs) if not p.is_alive()]
            if dead:
                r = rank if rank in dead else dead[0]
                return RankFailed(f"learner rank {r} died ({describe_exit(self.procs[r].exitcode)})")
            if time.monotonic() > deadline:
                return RankFailed(f"learner rank {rank} died (its pipe closed)") if rank is not None else None
            time.sleep(0.05)

    def sync_progress(self) -> list[int]:
        return list(self.progress)

    def where(self) -> list[dict]:
        """Each rank's host, pid and device on this machine."""
        host = socket.gethostname()
        return [{"host": host, "pid": p.pid, "devices": [f"cuda:{r}" if self.device == "cuda" else "cpu"]}
                for r, p in enumerate(self.procs)]

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.join(timeout=5)

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            if proc.is_alive():
                try:
                    conn.send((None, ()))
                except OSError:
                    pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()  # a rank stuck in a collective (a stalled sync) never reads its pipe
                proc.join(timeout=5)


class ShardedLearner:
    """``world_size`` learner ranks behind the :class:`~scalerl.pipeline.learner.role.LearnerRole`
    interface (module doc). ``template``: a CPU model of the run's architecture, the driver's
    evaluation and export copy."""

    def __init__(self, spec: RankSpec, template: torch.nn.Module, *, transport: str, peak_flop_s: float,
                 sync_timeout_s: float, nodes: tuple[str, ...] = ()) -> None:
        """``transport``: ``processes`` or ``ray`` (``backends.Capabilities.ranks``); ``nodes``:
        the Ray node of each rank (the run plan's)."""
        from scalerl.models.build import count_parameters
        from scalerl.pipeline.weights import WeightLayout

        self.spec, self.template, self.sync_timeout_s, self.nodes = spec, template, sync_timeout_s, nodes
        self.layout = WeightLayout(template)
        self.num_params, self.num_devices = count_parameters(template), spec.world
        self.version = 0
        self.peak_flop_s = peak_flop_s * spec.world  # learner_mfu is over all ranks
        self._snapshot_version = 0  # the template holds version 0 when built
        self.transport, self.ranks = transport, None

    def start(self, sink) -> None:
        """Start the ranks (each builds its shard and joins the group); rank 0 holds ``sink``
        when it can cross processes (``sink.crosses_processes``), else the driver writes it."""
        self._driver_sink = None if getattr(sink, "crosses_processes", False) else sink
        shared = sink if self._driver_sink is None else None
        if self.transport == "ray":
            from scalerl.pipeline.learner.ray_ranks import RayRanks

            self.ranks = RayRanks(self.spec, shared, self.nodes)
        else:
            self.ranks = _ProcessRanks(self.spec, shared)

    def _all(self, method: str, *args, timeout: float | None = None) -> list[Any]:
        self.ranks.call(method, *args)
        return self.ranks.gather(timeout)

    def step(self, groups) -> StepResult:
        start = time.perf_counter()
        replies = self._all("step", groups, self.version)
        metrics = step_metrics(replies[0]["batch_metrics"], [r["part"] for r in replies])
        busy = [r["busy_s"] for r in replies]
        metrics |= {LEARNER_BUSY: time.perf_counter() - start, "learner_cpu_s": sum(r["cpu_s"] for r in replies),
                    LEARNER_WORLD_SIZE: self.spec.world, "learner_rank_busy_s_max": max(busy),
                    "learner_rank_busy_s_min": min(busy),
                    **rate_metrics(self.num_params, metrics["step_trained_tokens"], max(busy), self.peak_flop_s)}
        self.version += 1
        return StepResult(metrics, replies[0]["pass_rates"])

    def publish(self, sink=None) -> Published:
        """Sync the current version into the sink given at :meth:`start` (``sink`` is that one)."""
        start = time.perf_counter()
        try:
            replies = self._all("publish", self.version, timeout=self.sync_timeout_s)
        except TimeoutError as late:
            progress = self.ranks.sync_progress()
            rank = min(late.args[0], key=lambda r: progress[r])  # the laggard; the rest wait on it
            self.ranks.kill()  # stuck in a collective: they would never read another call
            raise SyncTimeout(
                f"the weight sync of policy version {self.version} ran past learner.sync_timeout_s="
                f"{self.sync_timeout_s:g} s: learner rank {rank} stalled at bucket {progress[rank] // 2 + 1} "
                f"(of learner.sync_bucket_mb={self.spec.bucket_bytes >> 20} MiB each)") from None
        handle = replies[0]["handle"]
        if self._driver_sink is not None:
            buckets = ({n: torch.from_numpy(a) for n, a in b.items()} for b in replies[0]["buckets"])
            handle = self._driver_sink.write(self.version, buckets)
        return Published(handle, time.perf_counter() - start, replies[0]["bytes"])

    def eval_snapshot(self) -> torch.nn.Module:
        if self._snapshot_version != self.version:
            from scalerl.models.lora import is_lora

            state = self.state_dict()["model"]
            self.template.load_state_dict(state, strict=not is_lora(self.template))
            self._snapshot_version = self.version
        return self.template

    def state_dict(self) -> dict[str, Any]:
        return self._all("state_dict")[0] | {"version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._all("load_state_dict", state)
        self.version = int(state["version"])
        self._snapshot_version = -1

    def placement(self) -> list[dict[str, Any]]:
        """Where each rank runs (host, pid, devices; its node on Ray)."""
        return [{"role": f"learner rank {r}", **w} for r, w in enumerate(self.ranks.where())]

    def memory(self) -> list[dict[str, int]]:
        """Per rank, the bytes of parameters and optimiser state it holds."""
        return self._all("memory")

    def close(self) -> None:
        if self.ranks is not None:
            self.ranks.close()
