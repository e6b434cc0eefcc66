"""What a run tells its user about the rewards: how they are trained on, and what the first
batch showed.

- At start, one line (:func:`describe_rewards`): the reward as returned, what the loss trains
  on (``task.reward``'s form and ``length.truncation_is_failure``, ``auto`` decided), what a
  pass is (``task.pass_threshold``) and which validation curve the forecast fits
  (``forecast.metric``). Nothing about a user's reward changes without being said here.
- On the first batch (:func:`check_first_batch`): user code that failed on every sample stops
  the run with one sentence naming it (of several reward functions, the one that failed); a reward function that declined every sample is said once; a
  graded reward (a value other than −1, 0 or 1) under the pass-rate forecast is warned about
  once, since a pass then means reaching ``task.pass_threshold``, not "some credit".
"""

from __future__ import annotations

import math

import numpy as np

from scalerl.config import Config, ConfigError
from scalerl.data.tasks.user_reward import metric_names

GRADES = (-1.0, 0.0, 1.0)
"""Rewards a pass/fail reward takes ({0, 1} or ±1); any other value is graded (partial credit)."""


def describe_rewards(cfg: Config) -> str:
    """The one start line, a sentence: where r comes from and where it is logged, what the loss
    trains on, what a pass is and which curve the forecast fits, each with its key. (It once
    read "r as task.reward_fns A B (weighted sum) returns it is logged as ...", which a newcomer
    could not parse.)"""
    form = "2r − 1, the paper's ±1" if cfg.reward_form == "pm1" else "r as returned"
    cut = ("a completion cut by sampling.max_new_tokens trains as a failure, r = 0" if cfg.truncation_fails
           else "a cut completion keeps its reward")
    each = " and each function's as reward/<NAME>" if cfg.task.reward_fns else ""
    return (f"rewards: r, {_source(cfg)}, is logged as reward_mean{each}; the loss trains on {form} "
            f"(task.reward={cfg.reward_form}{' from auto' if cfg.task.reward == 'auto' else ''}), and {cut} "
            f"(length.truncation_is_failure={str(cfg.truncation_fails).lower()}"
            f"{' from auto' if cfg.length.truncation_is_failure == 'auto' else ''}); a sample passes at r ≥ "
            f"{cfg.task.pass_threshold:g} (task.pass_threshold), and the forecast fits {cfg.fitted_metric} "
            "(forecast.metric).")


def _source(cfg: Config) -> str:
    """Where r comes from, as a noun phrase."""
    specs = cfg.task.reward_specs
    if cfg.task.reward_fns:
        weights = ", weighted by task.reward_weights" if cfg.task.reward_weights is not None else ""
        return f"the sum of what task.reward_fns {', '.join(specs)} return{weights}"
    if specs:
        return f"what task.reward_fn {specs[0]} returns"
    if cfg.env.name is not None:
        return f"the reward env.name {cfg.env.name} returns"
    return f"task {cfg.task.name}'s reward"


def check_first_batch(cfg: Config, batch, log) -> None:
    """A user's environment (``env.name``) or reward function (``task.reward_fn``) that failed
    on every sample of the run's first batch is broken, not unlucky: :class:`ConfigError`, one
    sentence (its first failure was shown where it happened). A reward function that declined
    (None) every sample of it, and a graded reward under the pass-rate forecast, are said once
    through ``log``: training goes on."""
    total = sum(len(g.completions) for g in batch)
    rewards = np.concatenate([np.asarray(g.rewards, dtype=np.float64) for g in batch]) if batch else np.empty(0)
    unscored = int(np.isnan(rewards).sum())
    specs = " ".join(cfg.task.reward_specs)  # task.reward_fn, or each of task.reward_fns
    field = "task.reward_fns" if cfg.task.reward_fns else "task.reward_fn"
    if specs and total and unscored >= total:
        log(f"{field} {specs} returned None (cannot be scored) for every sample of the "
            f"first batch ({unscored} of {total}, counted in reward_none), so nothing could be learned from it "
            "and a validation with no scored sample has no pass rate (null); a function that ends without "
            "`return` returns None.")
    graded = _graded(rewards)
    if graded is not None and cfg.forecast.metric == "pass_rate":
        log(f"the reward is graded (the first batch has r = {graded:g}): a sample passes only at r ≥ "
            f"{cfg.task.pass_threshold:g} (task.pass_threshold), so pass_rate and val_pass_rate count those, and "
            "the forecast fits val_pass_rate; set task.pass_threshold to what a pass is, or "
            "forecast.metric=reward_mean to forecast the mean reward (logged as val_reward_mean).")
    if cfg.env.name is not None:
        what, counter, errors = f"env.name {cfg.env.name}", "env_errors", sum(g.env_errors for g in batch)
    elif specs:
        what, counter, errors = _failed_functions(cfg, batch, total)
    else:
        return
    if total and errors >= total:
        raise ConfigError(f"{what} failed on every sample of the first batch ({errors} of {total}, counted in "
                          f"{counter}; the first failure is shown above), so nothing could be learned; fix it "
                          "and run again.")


def _failed_functions(cfg: Config, batch, total: int) -> tuple[str, str, int]:
    """(the reward functions to blame, their counter, samples failed) for the first batch's stop.

    Each group says how many samples each function failed on (``Group.reward_part_errors``), so
    of several functions only the one that failed on every sample is named, not the list
    (``task.reward_fns a.py:accuracy b.py:format`` when only ``format`` is broken sent the user
    to both). When none failed on every sample but together they failed every one, each that
    failed is named with its count. Groups that carry no counts (a task's own grading) name
    every function, as before the counts existed."""
    field = "task.reward_fns" if cfg.task.reward_fns else "task.reward_fn"
    specs = cfg.task.reward_specs
    errors = sum(g.reward_errors for g in batch)
    counts = dict.fromkeys(metric_names(specs), 0)
    for g in batch:
        for name, n in g.reward_part_errors.items():
            counts[name] = counts.get(name, 0) + n
    by_spec = dict(zip(specs, counts.values()))
    if not any(by_spec.values()):
        return f"{field} {' '.join(specs)}", "reward_errors", errors
    broken = [spec for spec, n in by_spec.items() if total and n >= total]
    if broken:
        return f"{field} {' '.join(broken)}", "reward_errors", total
    some = " and ".join(f"{spec} (on {n})" for spec, n in by_spec.items() if n)
    return f"{field} {some} between them", "reward_errors", errors


def _graded(rewards: np.ndarray) -> float | None:  # (N,) as returned, NaN = not scored
    """The first scored reward that is not −1, 0 or 1, or None."""
    for r in rewards:
        if not math.isnan(r) and not any(abs(r - g) < 1e-6 for g in GRADES):
            return float(r)
    return None
