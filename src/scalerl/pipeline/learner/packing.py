"""The learner's fast forward: each group's shared prompt runs once, micro-batches are length-bucketed.

A group's G completions share one prompt, so the plain learner forward (prompt + completion
of every row, right-padded to the longest row) recomputes that prompt G times and pays for
the padding. Here, per micro-batch of rows ``R`` with distinct prompts ``U``:

1. the distinct prompts run through the model body once, right-padded, with the KV cache on
   (built under autograd, so the gradient flows back through it);
2. the cache is indexed out to the rows (``cache.batch_select_indices``, a differentiable
   gather) and each row forwards only its completion inputs ``y_0 … y_{n−2}`` at positions
   ``|x| … |x| + n − 2``, with the prompt's padding masked out;
3. the hidden state predicting ``y_0`` is the prompt's last one, those predicting ``y_j``
   (j ≥ 1) come from completion position ``j − 1``: ``h_r = [h_x[|x| − 1]; h_y[0 : n − 1]]``,
   which the caller's head (``algo.logprobs.head_logprobs``) scores.

The last completion token is never an input: its logits would predict nothing. The result is
the plain path's hidden states up to float summation order (``tests/pipeline/learner/test_shared_prompt.py``).

:func:`micro_batches` orders the live rows for it: either a prompt's rows together (each
prompt forwarded once) or all rows by completion length (similar lengths share a micro-batch,
so less padding), whichever forwards fewer token positions in all. Either way the longest
rows come first, so an out-of-memory shows in the first micro-batch. The loss is ``Σ w·ℓ``
over tokens, so the row order does not change the gradient (up to float summation order).
"""

from __future__ import annotations

import numpy as np
import torch

from scalerl.models.forward import forward_hidden
from scalerl.pipeline.learner.batch import pad
from scalerl.types import Completion


def _prompt_key(c: Completion) -> bytes:
    return np.asarray(c.prompt_tokens, dtype=np.int64).tobytes()


def forward_slots(completions: list[Completion], idx: list[int]) -> int:
    """Token positions :func:`shared_prompt_hidden` runs the body over for rows ``idx``, padding
    included: ``U · max|x| + n · (W − 1)`` (U distinct prompts, n rows, W the longest completion)."""
    prompts = {_prompt_key(completions[i]): len(completions[i].prompt_tokens) for i in idx}
    width = max(1, max(len(completions[i].tokens) for i in idx))
    return len(prompts) * max(prompts.values()) + len(idx) * (width - 1)


def _group_major(completions: list[Completion], rows: list[int]) -> list[int]:
    """One prompt's rows together; groups by their longest row, rows by length, longest first."""
    by_prompt: dict[bytes, list[int]] = {}
    for i in rows:
        by_prompt.setdefault(_prompt_key(completions[i]), []).append(i)
    groups = [sorted(g, key=lambda i: -len(completions[i].tokens)) for g in by_prompt.values()]
    groups.sort(key=lambda g: -(len(completions[g[0]].prompt_tokens) + len(completions[g[0]].tokens)))
    return [i for g in groups for i in g]


def _length_major(completions: list[Completion], rows: list[int]) -> list[int]:
    """Rows by completion length, longest first; equal lengths keep a prompt's rows together."""
    return sorted(rows, key=lambda i: (-len(completions[i].tokens), _prompt_key(completions[i])))


def _cut(completions: list[Completion], order: list[int], size: int, max_slots: int | None) -> list[list[int]]:
    """``order`` cut greedily into chunks of at most ``size`` rows and ``max_slots`` forwarded
    positions (a row longer than the budget alone still gets a chunk)."""
    chunks: list[list[int]] = []
    for i in order:
        if chunks and len(chunks[-1]) < size and (
                max_slots is None or forward_slots(completions, chunks[-1] + [i]) <= max_slots):
            chunks[-1].append(i)
        else:
            chunks.append([i])
    return chunks


def micro_batches(completions: list[Completion], rows: list[int], size: int,
                  max_slots: int | None = None) -> list[list[int]]:
    """``rows`` reordered and cut into chunks of at most ``size`` rows and ``max_slots``
    forwarded positions: of the group-major order (a prompt forwarded once for all its rows)
    and the length-major one (least padding), the one that forwards fewer
    :func:`forward_slots` in all; group-major on a tie. Short prompts with spread-out
    completion lengths favour length-major, long shared prompts group-major. The slot budget
    keeps a micro-batch's activations cache-sized: on the CPU a 64 × 138-token micro-batch
    ran 1.45× slower than the same rows in chunks of ≤ 16 (``bench/learner.py``)."""
    best, best_cost = [], None
    for order in (_group_major, _length_major):  # sorted() is stable: the result is deterministic
        chunks = _cut(completions, order(completions, rows), size, max_slots)
        cost = sum(forward_slots(completions, c) for c in chunks)
        if best_cost is None or cost < best_cost:
            best, best_cost = chunks, cost
    return best


def _distinct_prompts(completions: list[Completion], idx: list[int]) -> tuple[list[np.ndarray], list[int]]:
    """The distinct prompts of rows ``idx`` (first-seen order) and each row's index into them."""
    first: dict[bytes, int] = {}
    prompts, which = [], []
    for i in idx:
        key = _prompt_key(completions[i])
        if key not in first:
            first[key] = len(prompts)
            prompts.append(np.asarray(completions[i].prompt_tokens, dtype=np.int64))
        which.append(first[key])
    return prompts, which


def shared_prompt_hidden(model, completions: list[Completion], idx: list[int], *, pad_id: int,
                         device) -> tuple[torch.Tensor, int, int]:
    """``(hidden (n, W, H), real tokens forwarded, token slots forwarded)`` for rows ``idx``,
    ``W`` their longest completion; ``hidden[r, j]`` predicts completion token ``j`` (module doc).
    Runs under the caller's autocast.

    Real tokens: each distinct prompt once plus every completion token but the last; slots
    add the padding. Those are the positions the body actually computed."""
    prompts, which = _distinct_prompts(completions, idx)
    row_prompt = torch.tensor(which, device=device)  # (n,) row -> distinct prompt
    prompt_ids = pad(prompts, pad_id, torch.long).to(device)  # (U, Lp)
    prompt_attn = pad([np.ones(len(p), dtype=np.int64) for p in prompts], 0, torch.long).to(device)  # (U, Lp)
    prompt_len = prompt_attn.sum(dim=1)  # (U,)
    width = max(1, max(len(completions[i].tokens) for i in idx))
    hidden_x, cache = forward_hidden(model, prompt_ids, attention_mask=prompt_attn, use_cache=True)  # (U, Lp, H)
    last = hidden_x[torch.arange(len(prompts), device=device), prompt_len - 1]  # (U, H) predicts y_0
    hidden = last[row_prompt][:, None]  # (n, 1, H)
    real, slots = int(prompt_attn.sum()), prompt_ids.numel()
    if width > 1:  # some row has a y_1 to predict: forward y_0 … y_{W−2} on the shared cache
        inputs = [completions[i].tokens[:-1] for i in idx]
        ids = pad(inputs, pad_id, torch.long).to(device)  # (n, W − 1)
        attn = pad([np.ones(len(t), dtype=np.int64) for t in inputs], 0, torch.long).to(device)  # (n, W − 1)
        cache.batch_select_indices(row_prompt)  # (U, …) -> (n, …); indexing keeps the graph
        full_attn = torch.cat([prompt_attn[row_prompt], attn], dim=1)  # (n, Lp + W − 1)
        # positions continue from each row's own prompt length, not from the padded Lp
        positions = prompt_len[row_prompt][:, None] + torch.arange(width - 1, device=device)[None, :]
        hidden_y, _ = forward_hidden(model, ids, attention_mask=full_attn, position_ids=positions,
                                     past_key_values=cache)  # (n, W − 1, H)
        hidden = torch.cat([hidden, hidden_y], dim=1)  # (n, W, H)
        real, slots = real + int(attn.sum()), slots + ids.numel()
    return hidden, real, slots
