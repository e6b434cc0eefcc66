"""Held-out validation: mean@k pass rate of the engine's current weights (digest §4.3).

The paper samples 16 completions for each of 1,000 held-out prompts every 100 steps and fits
the sigmoid law to the *mean pass rate* ``(1/P) Σ_p (1/k) Σ_i 1[r_{p,i} ≥ τ]`` (mean@k), with
``τ`` the pass threshold (``task.pass_threshold``; the paper's rewards are {0, 1}, so any
τ in (0, 1] is the same there). The mean reward ``(1/P) Σ_p (1/k) Σ_i r_{p,i}``, as returned,
is measured beside it, for graded rewards.
Here ``k`` and the number of prompts are arguments; the sampling settings (and so the length
control) are the caller's, normally the training ones with a fixed seed, so successive
validations share their random numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scalerl.data.tasks.base import passes
from scalerl.rollout.engine import GenerationEngine
from scalerl.types import Completion, SamplingParams


@dataclass(frozen=True)
class ValidationResult:
    mean_at_k: float
    """Mean over prompts of the fraction of the k samples that are correct."""
    pass_rates: np.ndarray  # (P,) per-prompt fraction correct
    truncation_rate: float
    """Fraction of samples cut by a length budget (finish reason "length")."""
    mean_length: float
    """Mean completion length in tokens (injected interruption tokens included)."""
    num_samples: int
    samples: tuple = ()
    """The first completion of each of the first ``samples`` prompts (:func:`sample_record`)."""
    mean_turns: float = 1.0
    """Mean model turns per trajectory (1 without an environment)."""
    correct: np.ndarray | None = None  # (P,) correct samples per prompt
    scored: np.ndarray | None = None  # (P,) scored samples per prompt (k unless a reward was None)
    reward_means: np.ndarray | None = None  # (P,) per-prompt mean of the rewards as returned

    @property
    def reward_mean(self) -> float:
        """Mean over prompts of each prompt's mean reward as returned (NaN when none scored)."""
        return float(self.reward_means.mean()) if self.reward_means is not None and self.reward_means.size else math.nan

    @property
    def reward_stderr(self) -> float:
        """Standard error of :attr:`reward_mean` over prompts, as :attr:`stderr` (the prompts
        are the independent units)."""
        return _over_prompts(self.reward_means if self.reward_means is not None else np.empty(0))

    def pass_at(self, k: int) -> tuple[float, float]:
        """Unbiased pass@k over prompts and its standard error over prompts (as ``stderr``).

        Prompts with fewer than ``k`` scored samples have no unbiased estimate and are left
        out; NaN when none is left.
        """
        keep = self.scored >= k
        per_prompt = pass_at_k(self.scored[keep], self.correct[keep], k)  # (P',)
        if per_prompt.size == 0:
            return float("nan"), float("nan")
        se = float(per_prompt.std(ddof=1) / np.sqrt(per_prompt.size)) if per_prompt.size > 1 else float("nan")
        return float(per_prompt.mean()), se

    @property
    def stderr(self) -> float:
        """Standard error of ``mean_at_k``: ``sd(pass_rates, ddof=1) / sqrt(P)``.

        The prompts are the independent units: the k samples of one prompt share its
        difficulty and are correlated, so treating the P*k samples as independent (the
        binomial ``sqrt(p (1 - p) / (P k))``) would understate the error. Averaging within
        each prompt first is the cluster-robust estimate. NaN for a single prompt.
        """
        return _over_prompts(self.pass_rates)


def _over_prompts(per_prompt: np.ndarray) -> float:  # (P,)
    """``sd(per_prompt, ddof=1) / sqrt(P)``; NaN for fewer than two prompts."""
    P = per_prompt.size
    return float(per_prompt.std(ddof=1) / np.sqrt(P)) if P > 1 else float("nan")


def pass_at_k(n, c, k: int) -> np.ndarray:
    """Unbiased pass@k of prompts with ``n`` samples of which ``c`` are correct: (P,).

    ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021, Codex, Eq. 1), the chance that ``k`` of
    the ``n`` samples drawn without replacement hold a correct one, computed as
    ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, which never forms the huge binomials.
    Needs ``k <= n``; it is 1 when ``n - c < k``.
    """
    n, c = np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64)
    out = np.empty(n.shape, dtype=np.float64)
    for j, (nj, cj) in enumerate(zip(n.ravel(), c.ravel())):
        if k > nj:
            raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {nj}")
        out.flat[j] = 1.0 if nj - cj < k else 1.0 - float(np.prod(1.0 - k / np.arange(nj - cj + 1, nj + 1)))
    return out


def validate(
    engine: GenerationEngine,
    task,
    *,
    params: SamplingParams,
    tokenizer=None,
    k: int = 4,
    num_prompts: int | None = None,
    renderer=None,
    samples: int = 0,
    rollout=None,
    stop=None,
    pass_threshold: float = 1.0,
) -> ValidationResult:
    """Sample ``k`` trajectories for the first ``num_prompts`` validation examples of ``task``.

    Trajectories come from ``rollout`` (``scalerl.rollout.rollout``: an environment's turns
    when training has one) or, by default, one turn per prompt rendered as the generator
    role renders them (``renderer``, a :class:`~scalerl.models.chat.PromptRenderer`; by
    default one on the engine's tokenizer, or ``tokenizer``, with the default chat format)
    and scored by the task. A sample is correct when its reward as returned is at least
    ``pass_threshold`` (``data.tasks.base.passes``); NaN (not scored) is left out. ``stop()`` (a stop request) is
    checked between decode steps and user calls: once true, ``RolloutStopped`` is raised.
    """
    if k < 1:
        raise ValueError(f"validate: k must be >= 1, got {k}")
    if renderer is None:
        from scalerl.models.chat import PromptRenderer

        renderer = PromptRenderer(tokenizer if tokenizer is not None else engine.tokenizer)
    if rollout is None:
        from scalerl.rollout.rollout import SingleTurn

        rollout = SingleTurn(task, renderer)
    examples = list(task.validation())[:num_prompts]
    if not examples:
        raise ValueError(f"validate: task {getattr(task, 'name', task)!r} has no validation examples")
    from scalerl.rollout.trajectory import stop_hook

    scored_groups = rollout.run(engine, examples, k, params, on_step=stop_hook(stop))  # prompt-major: k per prompt
    completions = [c for t in scored_groups for c in t.completions]
    rewards = np.concatenate([t.rewards for t in scored_groups]).astype(np.float64)
    scored = ~np.isnan(rewards).reshape(len(examples), k)  # a reward function's None: left out
    values = np.nan_to_num(rewards).reshape(len(examples), k)
    correct = passes(values, pass_threshold) & scored
    # a prompt none of whose samples could be scored has no pass rate: it is left out too
    kept, per_prompt = scored.any(axis=1), np.maximum(scored.sum(axis=1), 1)
    pass_rates = (correct.sum(axis=1) / per_prompt)[kept]
    shown = [sample_record(renderer.text(scored_groups[p].prompt), completions[p * k], float(rewards[p * k]))
             for p in range(min(samples, len(examples)))]
    return ValidationResult(
        mean_at_k=float(pass_rates.mean()) if pass_rates.size else math.nan,  # none scored: no rate
        pass_rates=pass_rates,
        correct=correct.sum(axis=1)[kept],
        scored=scored.sum(axis=1)[kept],
        reward_means=((values * scored).sum(axis=1) / per_prompt)[kept],
        truncation_rate=float(np.mean([c.finish_reason == "length" for c in completions])),
        mean_length=float(np.mean([c.num_tokens for c in completions])),
        num_samples=len(completions),
        samples=tuple(shown),
        mean_turns=float(np.mean([c.model_turns for c in completions])),
    )


def sample_record(prompt_text: str, completion: Completion, reward: float) -> dict:
    """One ``samples.jsonl`` line: the prompt as rendered, the completion, its reward and finish
    reason; a multi-turn trajectory adds its ``turns``, each ``{role, text, tokens, masked}``
    (``masked``: tokens of the turn out of the loss, all of an observation's)."""
    record = {"prompt": prompt_text, "completion": completion.text, "reward": reward,
              "finish_reason": completion.finish_reason}
    if completion.turns:
        record["turns"] = [{"role": t.role, "text": t.text, "tokens": t.end - t.start,
                            "masked": int((~completion.loss_mask[t.start : t.end]).sum())} for t in completion.turns]
    return record
