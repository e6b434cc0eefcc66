"""From P groups × G completions to what the loss needs: rewards to advantages, masks, weights.

:func:`prepare_batch` is the pure half of a learner step (no model, no optimiser), in the
order of the digest (§4.2, §2.10), each a switch of the config:

0. a completion cut by ``max_new_tokens`` scores as wrong (``length.truncation_is_failure``);
1. curriculum: every prompt's pass rate on this visit, for the pool's no-positive resampling
   (digest §2.8) — returned in :attr:`Batch.pass_rates`; the driver records them;
2. reward shaping: the App. A.10 length penalty on correct traces (``length.control=penalty``);
3. truncation rule (``filters.truncation_masks``) and the zero-variance filter (§2.7);
4. advantages ``Â = r − mean_group(r)`` normalised by batch / prompt / no std (§2.6);
5. the loss-token mask (forced interruption tokens are out through ``Completion.loss_mask``)
   and the aggregation weights on the FULL batch (prompt / sample / token average, §2.5).

Each switch is a field of :class:`~scalerl.pipeline.rules.BatchRules`. Every learner rank runs
this on the whole batch (it is cheap and deterministic), so batch-level normalisation and the
filters see every group, and the full-batch weights make the ranks' gradients sum exactly.

Layout: row ``i = p·G + g`` is completion ``g`` of prompt ``p`` (prompt-major, as algo expects).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from scalerl.algo.advantages import group_advantages
from scalerl.algo.aggregate import token_weights
from scalerl.data.filters import (
    effective_batch,
    length_penalty,
    truncation_masks,
    zero_variance_mask,
)
from scalerl.data.tasks.user_reward import reward_part_metrics
from scalerl.pipeline.queues import staleness
from scalerl.pipeline.rules import BatchRules
from scalerl.rollout.rollout import trajectory_metrics
from scalerl.types import Completion, Group


def pad(rows: list[np.ndarray], value, dtype) -> torch.Tensor:  # (N, T_max)
    """Right-pad 1-D arrays into one tensor."""
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r, dtype=dtype)
    return out


@dataclass
class Batch:
    """One step's training input; tensors on the CPU, (N, T) unless noted."""

    completions: list[Completion]  # (N,) prompt-major
    tokens: torch.Tensor  # completion token ids
    behaviour: torch.Tensor  # generator log-probs
    fresh: torch.Tensor  # bool: sampled wholly (weights and the KV it read) by the learner's weights now
    mask: torch.Tensor  # bool: tokens in the loss
    weights: torch.Tensor  # aggregation weight of each loss token
    advantages: torch.Tensor  # (N,)
    rows: list[int]  # rows with any loss token, in order
    pass_rates: list[tuple[int, float]]  # (prompt_id, pass rate of this visit)
    metrics: dict[str, Any]  # batch statistics (rewards, lengths, filters, staleness)
    num_groups: int  # P: row i belongs to group i // (N / P)

    def group_rows(self) -> list[list[int]]:
        """The live rows of each group that has any, in order."""
        size = len(self.completions) // self.num_groups
        out: dict[int, list[int]] = {}
        for r in self.rows:
            out.setdefault(r // size, []).append(r)
        return list(out.values())


def _rewards(groups: list[Group], rules: BatchRules) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(P, G) rewards after the failure rule and shaping, truncated, correct and scored masks.

    A NaN reward is a sample its reward function declined to score (``None``): it is 0 here
    and ``scored`` is False, which keeps it out of its group's statistics and the loss."""
    rewards = torch.tensor(np.stack([g.rewards for g in groups]), dtype=torch.float32)  # (P, G)
    scored = ~torch.isnan(rewards)
    rewards = torch.nan_to_num(rewards, nan=0.0)
    truncated = torch.tensor([[c.finish_reason == "length" for c in g.completions] for g in groups])
    if rules.truncation_is_failure:  # an unfinished answer is a wrong answer
        rewards = torch.where(truncated, rewards.new_tensor(rules.wrong_reward), rewards)
    correct = rewards > 0  # pass/fail in {0,1} and ±1 forms alike
    if rules.length_control == "penalty":  # App. A.10 Eq. 9, instead of interruptions
        lengths = torch.tensor([[c.num_tokens for c in g.completions] for g in groups])  # (P, G)
        rewards = rewards + length_penalty(lengths, correct, max_len=rules.penalty_max_len,
                                           cache_len=rules.penalty_cache)
    return rewards, truncated, correct & scored, scored


def prepare_batch(groups: list[Group], rules: BatchRules, learner_version: int, pad_id: int) -> Batch:
    """Everything before the forward pass (module doc); no model, no side effects."""
    P, G = len(groups), len(groups[0].completions)
    completions = [c for g in groups for c in g.completions]
    rewards, truncated, correct, scored = _rewards(groups, rules)
    # float64 so that k/G is the exact decimal: float32 9/10 is 0.89999998 and misses 0.9
    rates = correct.double().sum(dim=1) / scored.double().sum(dim=1).clamp(min=1)
    pass_rates = [(g.prompt_id, r) for g, r in zip(groups, rates.tolist())]
    trunc = truncation_masks(truncated, rules.truncation)
    in_stats, in_loss = trunc.in_stats & scored, trunc.in_loss & scored
    keep = zero_variance_mask(rewards, in_stats) if rules.zero_variance else torch.ones(P, dtype=torch.bool)
    adv = group_advantages(rewards, rules.advantage_norm, rules.advantage_eps, keep=keep, valid=in_stats)
    live_rows = (keep[:, None] & in_loss).reshape(-1)  # (N,)
    mask = pad([c.loss_mask for c in completions], False, torch.bool) & live_rows[:, None]
    weights = token_weights(mask, torch.arange(P).repeat_interleave(G), rules.aggregation)
    versions = pad([c.versions for c in completions], -1, torch.long)
    kv_versions = pad([c.versions if c.kv_versions is None else c.kv_versions for c in completions], -1, torch.long)
    eff = effective_batch(keep, in_loss)
    stale = [staleness(g, learner_version) for g in groups]
    lengths = torch.tensor([c.num_tokens for c in completions], dtype=torch.float32)
    metrics = {
        "reward_mean": float(rewards[scored].mean()) if scored.any() else float("nan"),
        "pass_rate": float(correct.sum() / scored.sum().clamp(min=1)),
        "reward_none": int((~scored).sum()),
        "truncation_rate": float(truncated.float().mean()),
        "interrupted_rate": float(np.mean([c.finish_reason == "interrupted" for c in completions])),
        "completion_len": float(lengths.mean()),
        "effective_prompts": eff.kept_prompts,
        "effective_batch": eff.kept_completions / max(1, eff.total_completions),
        "staleness_mean": float(np.mean(stale)),
        "staleness_max": int(max(stale)),
        "staleness_hist": {str(s): stale.count(s) for s in sorted(set(stale))},
        # completions whose tokens came from more than one policy version (in-flight swaps)
        "inflight_frac": float(np.mean([c.num_tokens > 0 and c.versions.max() > c.versions.min()
                                        for c in completions])),
        **trajectory_metrics(completions),  # turns, tool calls, environment tokens
        **reward_part_metrics([g.reward_parts for g in groups]),  # reward/<NAME>(_std) per task.reward_fns
    }
    return Batch(completions, pad([c.tokens for c in completions], pad_id, torch.long),
                 pad([c.logprobs for c in completions], 0.0, torch.float32),
                 (versions == learner_version) & (kv_versions == learner_version),
                 mask, weights, adv.reshape(-1), torch.nonzero(mask.any(dim=1)).flatten().tolist(),
                 pass_rates, metrics, P)
