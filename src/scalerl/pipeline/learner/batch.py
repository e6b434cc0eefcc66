"""From P groups × G completions to what the loss needs: rewards to advantages, masks, weights.

:func:`prepare_batch` is the pure half of a learner step (no model, no optimiser), in the
order of the digest (§4.2, §2.10), each a switch of the config:

0. the rewards as returned to what the loss trains on (:func:`score`): a completion cut by
   ``max_new_tokens`` as a failure (``length.truncation_is_failure``), then ``task.reward``'s
   form (as is, or ``2r − 1``); a pass is a reward as returned ≥ ``task.pass_threshold``;
1. curriculum: every prompt's pass rate on this visit, for the pool's no-positive resampling
   (digest §2.8) — returned in :attr:`Batch.pass_rates`; the driver records them;
2. reward shaping: the App. A.10 length penalty on correct traces (``length.control=penalty``);
3. truncation rule (``filters.truncation_masks``) and the zero-variance filter (§2.7);
4. advantages ``Â = r − mean_group(r)`` normalised by batch / prompt / no std (§2.6);
5. the loss-token mask (forced interruption tokens are out through ``Completion.loss_mask``)
   and the aggregation weights on the FULL batch (prompt / sample / token average, §2.5).

Each switch is a field of :class:`~scalerl.pipeline.learner.rules.BatchRules`. Every learner rank runs
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
from scalerl.data.tasks.base import in_form, passes
from scalerl.data.tasks.user_reward import reward_part_metrics
from scalerl.pipeline.learner.rules import BatchRules
from scalerl.pipeline.queues import staleness
from scalerl.rollout.trajectory import trajectory_metrics
from scalerl.runfolder import STALENESS_HIST
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


@dataclass(frozen=True)
class Scores:
    """A batch's rewards, (P, G) each: as returned, and as the loss trains on them."""

    raw: torch.Tensor  # float32, as the task or the user's function returned it; 0 where not scored
    trained: torch.Tensor  # float32, after the failure rule, the form and the length penalty
    truncated: torch.Tensor  # bool: cut by max_new_tokens
    passed: torch.Tensor  # bool: raw ≥ task.pass_threshold (the pass rate's sense, as validation's)
    trained_passed: torch.Tensor  # bool: passed, and not failed by the truncation rule
    scored: torch.Tensor  # bool: the reward function gave a number (None is NaN: not scored)


def score(groups: list[Group], rules: BatchRules) -> Scores:
    """From the groups' rewards as returned to what the loss trains on (module doc, 0 and 2):
    ``r_train = form(0 if truncated and truncation_is_failure else r)`` (``form``: as is or
    ``2r − 1``), plus the App. A.10 length penalty on passes under ``length.control=penalty``.

    A NaN reward is a sample its reward function declined to score (``None``): it is 0 here
    and ``scored`` is False, which keeps it out of its group's statistics and the loss."""
    raw = torch.tensor(np.stack([g.rewards for g in groups]), dtype=torch.float32)  # (P, G)
    scored = ~torch.isnan(raw)
    raw = torch.nan_to_num(raw, nan=0.0)
    truncated = torch.tensor([[c.finish_reason == "length" for c in g.completions] for g in groups])
    passed = passes(raw, rules.pass_threshold) & scored
    trained, trained_passed = raw, passed
    if rules.truncation_is_failure:  # an unfinished answer is a wrong answer
        trained, trained_passed = torch.where(truncated, raw.new_tensor(0.0), raw), passed & ~truncated
    trained = in_form(trained, rules.reward_form)
    if rules.length_control == "penalty":  # App. A.10 Eq. 9, instead of interruptions
        lengths = torch.tensor([[c.num_tokens for c in g.completions] for g in groups])  # (P, G)
        trained = trained + length_penalty(lengths, trained_passed, max_len=rules.penalty_max_len,
                                           cache_len=rules.penalty_cache)
    return Scores(raw, trained, truncated, passed, trained_passed, scored)


def prepare_batch(groups: list[Group], rules: BatchRules, learner_version: int, pad_id: int) -> Batch:
    """Everything before the forward pass (module doc); no model, no side effects."""
    P, G = len(groups), len(groups[0].completions)
    completions = [c for g in groups for c in g.completions]
    scores = score(groups, rules)
    rewards, truncated, scored = scores.trained, scores.truncated, scores.scored
    # float64 so that k/G is the exact decimal: float32 9/10 is 0.89999998 and misses 0.9
    rates = scores.trained_passed.double().sum(dim=1) / scored.double().sum(dim=1).clamp(min=1)
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
        # the reward as the task or the user's function returned it, and what the loss trained on
        "reward_mean": float(scores.raw[scored].mean()) if scored.any() else float("nan"),
        "trained_reward_mean": float(rewards[scored].mean()) if scored.any() else float("nan"),
        "pass_rate": float(scores.passed.sum() / scored.sum().clamp(min=1)),
        "reward_none": int((~scored).sum()),
        "truncation_rate": float(truncated.float().mean()),
        "interrupted_rate": float(np.mean([c.finish_reason == "interrupted" for c in completions])),
        "completion_len": float(lengths.mean()),
        "effective_prompts": eff.kept_prompts,
        "effective_batch": eff.kept_completions / max(1, eff.total_completions),
        "staleness_mean": float(np.mean(stale)),
        "staleness_max": int(max(stale)),
        STALENESS_HIST: {str(s): stale.count(s) for s in sorted(set(stale))},
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
