"""Compute spent by a run, counted two ways: device-hours and analytic FLOPs.

1. **Device-hours** (the paper's GPU-hours, digest §1.7): wall-clock hours × devices of the
   whole allocation, generators and trainers alike. On CPU a "device" is one core a role
   holds (its torch threads, ``pipeline.plan.cores``: 1 learner thread + 1 generator on two
   cores), so the same run on a larger machine is not credited with free compute. Device-
   hours accumulate across resumes: the checkpoint stores what was spent before, so a
   resume on another machine adds at its own rate and never rewrites the past.
2. **Analytic FLOPs** with the usual dense-transformer estimate (Kaplan et al. 2020):
   a forward pass costs ``2·N_params`` per token and forward + backward ``6·N_params``, so
   ``FLOPs = 2·N·tokens_generated + 6·N·tokens_trained``. Generated tokens count the prompt
   prefill and every decoded token once (a KV cache avoids recomputation); trained tokens
   count prompt + completion of every completion the learner forwards. Attention's
   ``O(L²)`` term is ignored (sequences here are far shorter than the model width × 6).

The sigmoid fit uses device-hours as ``compute_gpu_hours``; FLOPs are logged beside it so
curves from different machines can be compared on a hardware-free axis.

Throughput (:class:`TokenRates`) is measured over the last ``RATE_WINDOW`` steps, not per step:
generated groups arrive in bursts (one collect can fill two steps' batches), so a per-step
rate read 0 on one step and twice the true rate on the next.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from scalerl.runfolder import COMPUTE, TOTAL_GEN_TOKENS, TOTAL_TRAINED_TOKENS, WALL

RATE_WINDOW = 10
"""Steps :class:`TokenRates` averages over: long enough to span several bursts of arriving
groups, short enough to follow a change of pace within a minute of a tiny run."""


class ComputeMeter:
    """Accumulates wall time × devices and generated/trained tokens.

    ``clock`` (seconds, default ``time.perf_counter``) is read for every wall-time figure;
    a test passes a fake one so its expected device-hours are exact, not a race.
    """

    def __init__(self, devices: int, n_params: int, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.devices, self.n_params = devices, n_params
        self._clock = clock
        self.previous_wall_s = 0.0  # spent in earlier segments of a resumed run
        self.previous_device_hours = 0.0
        self.gen_tokens = 0
        self.train_tokens = 0
        self._start = self._clock()

    def add_generation(self, tokens: int) -> None:
        self.gen_tokens += int(tokens)

    def add_training(self, tokens: int) -> None:
        self.train_tokens += int(tokens)

    @property
    def wall_s(self) -> float:
        return self.previous_wall_s + self._clock() - self._start

    @property
    def device_hours(self) -> float:
        """``Σ devices × wall-clock hours`` over the run's segments (resumes included)."""
        return self.previous_device_hours + self.devices * (self._clock() - self._start) / 3600.0

    @property
    def flops(self) -> float:
        """``2·N·generated + 6·N·trained`` tokens (forward-only vs forward + backward)."""
        return 2.0 * self.n_params * self.gen_tokens + 6.0 * self.n_params * self.train_tokens

    def snapshot(self) -> dict[str, float]:
        """The record fields every metrics line carries."""
        return {
            COMPUTE: self.device_hours,
            "flops": self.flops,
            WALL: self.wall_s,
            TOTAL_GEN_TOKENS: self.gen_tokens,
            TOTAL_TRAINED_TOKENS: self.train_tokens,
        }

    def state_dict(self) -> dict[str, float]:
        return {"wall_s": self.wall_s, "device_hours": self.device_hours, "gen_tokens": self.gen_tokens,
                "train_tokens": self.train_tokens}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.previous_wall_s = float(state["wall_s"])
        # checkpoints written before device-hours were stored: the segments ran on this count
        self.previous_device_hours = float(state.get("device_hours", self.devices * self.previous_wall_s / 3600.0))
        self.gen_tokens = int(state["gen_tokens"])
        self.train_tokens = int(state["train_tokens"])
        self._start = self._clock()


class TokenRates:
    """Generated and trained tokens per wall second over the last ``window`` steps.

    ``rate = (total_now − total_then) / (wall_now − wall_then)``, with *then* the snapshot
    ``window`` steps back (the session's first snapshot until there are that many): a mean
    over the window's time, which a step that received no group does not pull to 0.
    """

    def __init__(self, first: dict[str, float], window: int = RATE_WINDOW) -> None:
        self._snapshots: deque[dict[str, float]] = deque([first], maxlen=window + 1)

    def __call__(self, current: dict[str, float]) -> dict[str, float]:
        """Add the snapshot of the step just ended; the rates over the window it closes."""
        self._snapshots.append(current)  # drops the one past the window
        then = self._snapshots[0]
        dt = max(current["wall_s"] - then["wall_s"], 1e-9)
        return {
            "gen_tokens_per_s": (current[TOTAL_GEN_TOKENS] - then[TOTAL_GEN_TOKENS]) / dt,
            "trained_tokens_per_s": (current[TOTAL_TRAINED_TOKENS] - then[TOTAL_TRAINED_TOKENS]) / dt,
        }


def matmul_peak(device: str = "cpu", dtype=None, n: int | None = None, repeats: int = 5) -> float:
    """FLOP/s of an ``n × n`` by ``n × n`` matmul on ``device`` in ``dtype``, ``2·n³ / t`` with
    ``t`` the best of ``repeats`` timed calls after one warm-up: the dense throughput this
    process reaches with its torch threads, the denominator of ``learner_mfu`` (a data-sheet
    peak would hide what the machine actually gives). ``n`` defaults to 384 on the CPU and
    8192 on a GPU, where a small product measures kernel launch, not throughput; a GPU is
    first kept busy for about a second, since its clocks ramp up only under sustained load
    (an H200 idles at 345 MHz: one short warm-up would understate the peak and overstate MFU)."""
    import torch

    dtype = dtype or torch.float32
    accelerated = str(device).startswith("cuda")
    n = n or (8192 if accelerated else 384)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b  # warms kernels and caches
    if accelerated:
        torch.cuda.synchronize()
        ramp = time.perf_counter() + 1.0
        while time.perf_counter() < ramp:
            a @ b
            torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        if accelerated:
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if accelerated:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / max(best, 1e-12)
