"""Prompt pool with a pass-rate history: no-positive resampling (digest §2.8, §4.2).

Prompts are served in epochs: each epoch is a fresh shuffle of the prompts that are still
live, drawn from ``numpy.random.default_rng([seed, epoch])``, so the order of every epoch is
a pure function of the seed, the epoch number and the live set at the epoch's start.
``sample(n)`` walks that order and crosses epoch boundaries as needed (a pool smaller than
``n`` serves a prompt more than once in one call).

No-positive resampling (Polaris; ScaleRL keeps ``pass_rate(x) < 0.9``): after each training
visit the trainer calls ``record(prompt_id, pass_rate)``. Once a prompt's historical pass rate
is ``>= retire_threshold`` it is retired permanently: it is never served again, so it is absent
from every later epoch (and skipped if it already sits later in the current order, which
happens only when its record arrives after the next epoch was drawn, as under PipelineRL).
``retire_threshold=None`` is the uniform-resampling baseline: every prompt, every epoch.

History rule (the paper leaves it open): ``"last"`` (default) is the pass rate of the
prompt's most recent training visit, the digest's reading; ``"mean"`` is the running mean over
all its recorded visits. Validation rollouts should not be recorded.

When every prompt has retired there is nothing left to train on: ``sample`` raises
``PoolExhausted`` so the trainer can stop cleanly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

HISTORY_RULES = ("last", "mean")
_STATE_VERSION = 1


class PoolExhausted(RuntimeError):
    """Every prompt has been retired by no-positive resampling."""


class PromptPool:
    """Epoch-based shuffled prompt sampler that retires prompts once they are easy."""

    def __init__(
        self,
        num_prompts: int,
        *,
        seed: int = 0,
        retire_threshold: float | None = 0.9,
        history: str = "last",
    ) -> None:
        if num_prompts < 1:
            raise ValueError(f"PromptPool needs at least one prompt; got num_prompts={num_prompts}")
        if retire_threshold is not None and not 0.0 < retire_threshold <= 1.0:
            raise ValueError(f"retire_threshold must be in (0, 1] or None; got {retire_threshold}")
        if history not in HISTORY_RULES:
            raise ValueError(
                f"unknown history rule {history!r}; valid rules are: {', '.join(HISTORY_RULES)}"
            )
        self.num_prompts = num_prompts
        self.seed = seed
        self.retire_threshold = retire_threshold
        self.history = history
        self._visits = np.zeros(num_prompts, dtype=np.int64)
        self._rate_sum = np.zeros(num_prompts, dtype=np.float64)
        self._rate_last = np.full(num_prompts, np.nan)
        self._retired = np.zeros(num_prompts, dtype=bool)
        self.epoch = 0  # index of the epoch being served, 0-based
        self.position = 0  # entries of the current epoch's order already consumed
        self._order = self._draw_order(0)

    # ----------------------------------------------------------------------------- serving

    @property
    def live_size(self) -> int:
        """Prompts not retired."""
        return int(self.num_prompts - self._retired.sum())

    @property
    def retired(self) -> int:
        """Prompts retired so far."""
        return int(self._retired.sum())

    def _draw_order(self, epoch: int) -> np.ndarray:
        live = np.flatnonzero(~self._retired)
        if live.size == 0:
            raise PoolExhausted(
                f"all {self.num_prompts} prompts are retired (pass rate >= {self.retire_threshold}); "
                "nothing is left to sample"
            )
        return np.random.default_rng([self.seed, epoch]).permutation(live)

    def sample(self, n: int) -> list[int]:
        """The next ``n`` prompt ids, crossing into new (reshuffled) epochs as needed."""
        if n < 0:
            raise ValueError(f"sample(n) needs n >= 0; got {n}")
        out: list[np.ndarray] = []
        need = n
        while need > 0:  # one pass per epoch touched, not per prompt
            if self.position >= len(self._order):
                self._order = self._draw_order(self.epoch + 1)
                self.epoch += 1
                self.position = 0
            chunk = self._order[self.position : self.position + need]
            self.position += len(chunk)
            chunk = chunk[~self._retired[chunk]]
            out.append(chunk)
            need -= len(chunk)
        return [int(i) for i in np.concatenate(out)] if out else []

    # ----------------------------------------------------------------------------- history

    def record(self, prompt_id: int, pass_rate: float) -> None:
        """Add one training visit's pass rate (fraction of correct completions) to the history."""
        if not 0 <= prompt_id < self.num_prompts:
            raise ValueError(
                f"prompt_id {prompt_id} is outside the pool of {self.num_prompts} prompts"
            )
        if not 0.0 <= pass_rate <= 1.0:
            raise ValueError(f"pass_rate must be in [0, 1]; got {pass_rate} for prompt {prompt_id}")
        self._visits[prompt_id] += 1
        self._rate_sum[prompt_id] += pass_rate
        self._rate_last[prompt_id] = pass_rate
        rate = self.pass_rate(prompt_id)
        if self.retire_threshold is not None and rate is not None and rate >= self.retire_threshold:
            self._retired[prompt_id] = True  # permanent: the paper "permanently removes" it

    def pass_rate(self, prompt_id: int) -> float | None:
        """The historical pass rate under the pool's history rule; None before any visit."""
        if self._visits[prompt_id] == 0:
            return None
        if self.history == "last":
            return float(self._rate_last[prompt_id])
        return float(self._rate_sum[prompt_id] / self._visits[prompt_id])

    def is_retired(self, prompt_id: int) -> bool:
        return bool(self._retired[prompt_id])

    # ----------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state; ``load_state_dict`` on a pool built with the same arguments
        resumes the exact same future prompt sequence."""
        return {
            "version": _STATE_VERSION,
            "num_prompts": self.num_prompts,
            "seed": self.seed,
            "retire_threshold": self.retire_threshold,
            "history": self.history,
            "epoch": self.epoch,
            "position": self.position,
            "order": [int(i) for i in self._order],
            "visits": self._visits.tolist(),
            "rate_sum": self._rate_sum.tolist(),
            "rate_last": [None if np.isnan(r) else float(r) for r in self._rate_last],
            "retired": np.flatnonzero(self._retired).tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``; the pool's construction arguments must match the saved ones."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"prompt-pool state has version {state.get('version')!r}; expected {_STATE_VERSION}"
            )
        for field in ("num_prompts", "seed", "retire_threshold", "history"):
            if state[field] != getattr(self, field):
                raise ValueError(
                    f"prompt-pool state field {field!r} is {state[field]!r} but this pool has {getattr(self, field)!r}"
                )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = np.asarray(state["order"], dtype=np.int64)
        self._visits = np.asarray(state["visits"], dtype=np.int64)
        self._rate_sum = np.asarray(state["rate_sum"], dtype=np.float64)
        self._rate_last = np.array(
            [np.nan if r is None else r for r in state["rate_last"]], dtype=np.float64
        )
        self._retired = np.zeros(self.num_prompts, dtype=bool)
        self._retired[np.asarray(state["retired"], dtype=np.int64)] = True
