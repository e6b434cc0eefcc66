"""KV of the last call's rows, reused by the next call whose prompts extend them (multi-turn).

A multi-turn episode's next prompt is its history: the previous prompt, the tokens just
sampled, the environment's observation. Prefilling that whole history every turn costs more
than the turn's decoding on a small model (half of a 3-turn episode's CPU time, measured).
:class:`PrefixKV` keeps, for every row of the last ``generate`` call, the keys and values the
engine computed for ``prompt + sampled[:-1]`` (the last sampled token was never fed), keyed
by exactly those ids; the next call looks each prompt up by exact token prefix and prefills
only the rest. The match is on token ids, so a reused cache always belongs to the same ids.

Semantics: KV reused across a weight update is stale, as the KV a running row keeps across
an in-flight update is (PipelineRL); each token still carries the version that sampled it,
and the oldest version of the KV it attended to (``Completion.kv_versions``).
Only the last call's rows are kept (a miss just prefills everything).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from scalerl.rollout.fast_decode import StaticKV


class RowKV:
    """One row's kept keys and values: the first ``len(real)`` columns of row ``row`` of the
    buffers of the call that computed them, ``real`` marking which are tokens (the rest is
    that call's padding).

    Nothing is copied when a row ends (copying every row's layers cost a fifth of a short
    turn's decode); a later call that reuses the row copies its columns once, padding and
    all, into its own buffers, and keeps their mask. Safe because a call never writes those
    columns again: decoding writes only the column after them, and dropping finished rows
    replaces the buffers by copies.
    """

    __slots__ = ("keys", "values", "row", "real", "oldest")

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], row: int,
                 real: torch.Tensor, oldest: int) -> None:
        self.keys, self.values = keys, values  # per layer (B, H, capacity, D)
        self.row = row
        self.real = real  # (width,) bool: the row's columns that hold tokens
        self.oldest = oldest  # the oldest policy version any of these columns was computed under


class PrefixKV:
    def __init__(self) -> None:
        self._entries: dict[tuple[int, ...], RowKV] = {}
        self._pending: dict[tuple[int, ...], RowKV] = {}

    def save(self, ids: Sequence[int], kv: RowKV) -> None:
        """Keep ``kv`` (the KV of ``ids``, in order) for the next call."""
        self._pending[tuple(int(t) for t in ids)] = kv

    def commit(self) -> None:
        """The rows saved during this call replace the previous call's."""
        self._entries, self._pending = self._pending, {}

    def lookup(self, prompt: Sequence[int]) -> tuple[int, RowKV | None]:
        """``(n, layers)``: the longest kept sequence that is a *proper* prefix of ``prompt``
        (at least one token is left to prefill, whose logits start the decode); ``(0, None)``."""
        ids = tuple(int(t) for t in prompt)
        best, found = 0, None
        for key, layers in self._entries.items():
            n = len(key)
            if best < n < len(ids) and ids[:n] == key:
                best, found = n, layers
        return best, found


def kept_kv(hits: list[tuple[int, RowKV | None]], extra: int, device) -> tuple[StaticKV, torch.Tensor]:
    """Lean-path KV buffers holding each row's reused columns, left-padded to the widest, with
    room for ``extra`` more, and their ``(B, width)`` bool mask (True = a token). Rows kept
    by one call share its buffers and width: one row gather and one copy per layer for all
    of them. Masked columns hold finite values (the old call's padding, or zeros): a weight
    of 0 times them must stay 0. Columns past ``width`` are written before they are read."""
    width = max((kv.real.numel() for _, kv in hits if kv is not None))
    sample = next(kv for _, kv in hits if kv is not None)
    keys = [k.new_empty((len(hits), k.shape[1], width + extra, k.shape[3])) for k in sample.keys]
    values = [v.new_empty((len(hits), v.shape[1], width + extra, v.shape[3])) for v in sample.values]
    mask = torch.zeros((len(hits), width), dtype=torch.bool, device=device)
    groups: dict[int, list[int]] = {}
    for row, (_, kv) in enumerate(hits):
        groups.setdefault(id(kv.keys) if kv is not None else 0, []).append(row)
    for key, rows in groups.items():
        dst = slice(None) if len(rows) == len(hits) else torch.tensor(rows, device=device)
        if key == 0:  # no kept KV: all padding
            for buffer in (*keys, *values):
                buffer[dst, :, :width] = 0.0
            continue
        source = hits[rows[0]][1]
        n = source.real.numel()
        src = torch.tensor([hits[row][1].row for row in rows], device=device)
        mask[dst, width - n :] = torch.stack([hits[row][1].real for row in rows])
        for new, old in zip((*keys, *values), (*source.keys, *source.values)):
            new[dst, :, width - n : width] = old.index_select(0, src)[:, :, :n]
            if n < width:
                new[dst, :, : width - n] = 0.0
    return StaticKV.of(keys, values, width), mask
