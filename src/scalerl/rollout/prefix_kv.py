"""KV of the last call's rows, reused by the next call whose prompts extend them (multi-turn).

A multi-turn episode's next prompt is its history: the previous prompt, the tokens just
sampled, the environment's observation. Prefilling that whole history every turn costs more
than the turn's decoding on a small model (half of a 3-turn episode's CPU time, measured).
:class:`PrefixKV` keeps, for every row of the last ``generate`` call, the keys and values the
engine computed for ``prompt + sampled[:-1]`` (the last sampled token was never fed), keyed
by exactly those ids; the next call looks each prompt up by exact token prefix and prefills
only the rest. The match is on token ids, so a reused cache always belongs to the same ids.

Semantics: KV reused across a weight update is stale, as the KV a running row keeps across
an in-flight update is (PipelineRL); each token still carries the version that sampled it.
Only the last call's rows are kept (a miss just prefills everything).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class RowKV:
    """One row's kept keys and values, read from the buffers of the call that computed them.

    Nothing is copied when a row ends (copying every row's layers cost a fifth of a short
    turn's decode); a later call that reuses the row gathers its columns once, into its own
    cache. Safe because a call never writes those columns again: decoding writes only the
    column after them, and dropping finished rows replaces the buffers by copies.
    """

    __slots__ = ("keys", "values", "row", "columns")

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], row: int,
                 columns: torch.Tensor) -> None:
        self.keys, self.values = keys, values  # per layer (B, H, capacity, D)
        self.row = row
        self.columns = columns  # (n,) the row's real columns, in order

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:  # keys, values (H, n, D)
        return (self.keys[i][self.row].index_select(1, self.columns),
                self.values[i][self.row].index_select(1, self.columns))


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


def prefilled_cache(hits: list[tuple[int, RowKV | None]], device):
    """A transformers ``DynamicCache`` holding each row's reused KV, left-padded to the
    longest, and its ``(B, C)`` attention mask (1 = real); rows without a hit hold padding."""
    from transformers import DynamicCache

    width = max(n for n, _ in hits)
    sample = next(kv for _, kv in hits if kv is not None)
    cache, mask = DynamicCache(), torch.zeros((len(hits), width), dtype=torch.long, device=device)
    for row, (n, kv) in enumerate(hits):
        if kv is not None:
            mask[row, width - n :] = 1
    for i, (k0, v0) in enumerate(zip(sample.keys, sample.values)):
        _, h, _, d = k0.shape
        keys = k0.new_zeros((len(hits), h, width, d))
        values = v0.new_zeros((len(hits), h, width, d))
        for row, (n, kv) in enumerate(hits):
            if kv is not None:
                keys[row, :, width - n :], values[row, :, width - n :] = kv.layer(i)
        cache.update(keys, values, i)
    return cache, mask
