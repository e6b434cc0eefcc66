"""Forced length interruptions (digest §2.9), as vectorised per-row state.

Per sequence an interruption point ``L_int ~ U{lo, ..., hi}`` is drawn. *Thinking tokens are
counted from the start of the completion* (the prompt is expected to open the thinking
block, e.g. to end with ``<think>``). If ``</think>`` has not been generated within the first
``L_int`` completion tokens, tokens ``L_int, L_int+1, ...`` are replaced by the
interruption phrase, one forced token per decode step. Forcing one token per step keeps the
batch in lock-step (every live row feeds exactly one token per forward), and the forced
tokens go through the model like sampled ones, so the KV cache contains them.

Forced tokens get ``loss_mask = False``; their recorded behaviour log-prob is the model's
log-prob of the forced token (computed anyway), masked from the loss either way.

After the phrase the model writes its answer with ``answer_budget`` tokens:
- it ends with EOS or a stop string within the budget -> finish reason ``"interrupted"``;
- the budget (or ``max_new_tokens``) runs out first -> ``"length"`` (truncated, like any
  over-long sample; the trainer's truncation policy applies to it).
"""

from __future__ import annotations

import torch

_NEVER = torch.iinfo(torch.long).max // 2


def interruption_points(seed: int, num_rows: int, lo: int, hi: int) -> torch.Tensor:  # (rows,)
    """Per-row thinking budget ``L_int ~ U{lo, ..., hi}`` (inclusive), reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi + 1, (num_rows,), generator=gen)


class Interrupter:
    """Per-row state: interruption point, phrase cursor, first answer step, ``</think>`` seen."""

    def __init__(
        self,
        phrase: list[int],
        points: torch.Tensor | None,  # (B,) int64 thinking budget per row; None = disabled
        answer_budget: int,
        num_rows: int,
        device: torch.device | str,
    ):
        self.phrase = torch.tensor(phrase, dtype=torch.long, device=device)
        self.answer_budget = answer_budget
        never = torch.full((num_rows,), _NEVER, dtype=torch.long, device=device)
        self.points = points.to(device) if points is not None else never.clone()
        self.cursor = torch.full((num_rows,), -1, dtype=torch.long, device=device)
        self.answer_from = never.clone()
        self.closed = torch.zeros(num_rows, dtype=torch.bool, device=device)
        self.enabled = points is not None and len(phrase) > 0

    @property
    def interrupted(self) -> torch.Tensor:  # (B,) bool: the phrase has started
        return (self.cursor >= 0) | (self.answer_from < _NEVER)

    def force(self, step: int, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Replace this step's sampled tokens (B,) by phrase tokens where due.

        Returns ``(tokens (B,), forced (B,) bool)``.
        """
        if not self.enabled:
            return tokens, torch.zeros_like(tokens, dtype=torch.bool)
        start = ~self.closed & ~self.interrupted & (self.points <= step)
        self.cursor = torch.where(start, 0, self.cursor)
        forced = self.cursor >= 0
        tokens = torch.where(forced, self.phrase[self.cursor.clamp(min=0)], tokens)
        self.cursor = torch.where(forced, self.cursor + 1, self.cursor)
        ended = forced & (self.cursor == len(self.phrase))
        self.answer_from = torch.where(ended, step + 1, self.answer_from)
        self.cursor = torch.where(ended, -1, self.cursor)
        return tokens, forced

    def observe_close(self, hit: torch.Tensor) -> None:  # (B,) bool: row just wrote </think>
        self.closed |= hit

    def over_budget(self, step: int) -> torch.Tensor:  # (B,) bool
        """Rows whose answer (after the phrase) has used the whole budget at ``step``."""
        return (step + 1 - self.answer_from) >= self.answer_budget

    def select(self, rows: torch.Tensor) -> None:  # (B',) int64 indices of the rows kept
        self.points = self.points[rows]
        self.cursor = self.cursor[rows]
        self.answer_from = self.answer_from[rows]
        self.closed = self.closed[rows]
