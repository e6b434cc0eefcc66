"""A user's reward functions (``task.reward_fn``, or several: ``task.reward_fns`` with
``task.reward_weights``), each ``FILE.py:NAME`` / ``package.module:NAME``.

Each function is in one of two forms, told apart by its signature:

- per sample, ``NAME(completion: str, **fields) -> float | None``, with the example's fields
  (``scalerl.data.tasks.dataset.reward_fields``: a dataset record's columns, or a built-in
  task's answer and metadata) and ``prompt``;
- TRL's, ``NAME(prompts, completions, **kwargs) -> list[float | None]`` (it names
  ``completions``), called once on a batch (``scalerl.data.tasks.trl_reward``).

Either may be ``async def``: its result is awaited within the call's time limit.

The functions replace the task's own reward; everything else about the task (data, prompts,
validation) stays. A sample's reward is the weighted sum over the functions that scored it,
``r = Σ_f w_f r_f`` skipping None (TRL's ``nansum``); none scored it: NaN, "cannot be scored".
Each function's own reward (``r_f``, NaN for None) is kept by name for the metrics
(``reward/<NAME>``, :func:`reward_part_metrics`).

- ``None`` from every function means "cannot be scored": the sample is counted in
  ``reward_none`` and left out of the loss and of its group's statistics (``pipeline.batch``).
- An exception inside a function, ``BaseException`` included (``SystemExit``,
  ``KeyboardInterrupt``), is caught per call: the function's reward for the call's samples
  (one, or a TRL-form batch) is 0, those samples are counted in ``reward_errors``, and each
  function's first traceback in the run is printed once (a policy that found the input that
  breaks the function will find it again and again; ``user_code.first_in_run`` keeps a
  generator and the driver's evaluation from each printing theirs).
- So is a call that runs past ``task.reward_timeout_s`` (each call has it): it is abandoned
  on its worker thread (``scalerl.user_code``: too many still running stop the run with one
  sentence).
- A result that is not a finite real number (within float32's range: rewards travel as
  float32) is an error of the same kind (``data.tasks.base.checked_reward``); for a TRL-form
  call, a list of the wrong length or not a list fails the call, a bad entry its sample.

The functions are loaded from their specs in every process that scores (generators, local
and Ray alike, and the learner's evaluation), so nothing about them has to be picklable.
"""

from __future__ import annotations

import inspect
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scalerl.data.tasks.base import REWARD_LIMIT, Example, checked_reward
from scalerl.data.tasks.dataset import reward_fields
from scalerl.data.tasks.trl_reward import (
    BatchEntryError,
    TrainerState,
    batch_kwargs,
    checked_batch,
    takes_batch,
)
from scalerl.plugins import PluginError, check_parameter, load
from scalerl.user_code import TooManyStuck, UserCalls, UserCodeFailed, first_in_run, format_failure


def load_reward_fn(spec: str, what: str = "task.reward_fn"):
    """The function named by ``spec``, checked to take ``completion`` (per sample) or
    ``completions`` (TRL's form); ``PluginError``, one sentence, otherwise."""
    fn = load(spec, what)
    if callable(fn) and takes_batch(fn):
        return fn
    try:
        check_parameter(fn, "completion", spec, what)
    except PluginError:
        if not callable(fn):
            raise
        raise PluginError(f"{what} {spec!r} takes no 'completion' parameter (called per sample as "
                          f"{fn.__name__}(completion, **fields) -> float | None) and no 'completions' parameter "
                          "(TRL's form, called on a batch as NAME(prompts, completions, **columns) -> list)") from None
    return fn


def awaited(value):
    """``value``, awaited on a loop of its own if it is awaitable (an ``async def`` function's
    result, as TRL accepts), on the calling (worker) thread so the time limit bounds it."""
    if not inspect.isawaitable(value):
        return value
    import asyncio

    async def wait():
        return await value

    return asyncio.run(wait())


def _per_sample(fn: Callable, text: str, fields: dict):
    return awaited(fn(completion=text, **fields))


def metric_names(specs: Sequence[str]) -> list[str]:
    """Each spec's ``NAME`` (after the colon), or ``NAME_<position>`` (1-based) where two share one."""
    names = [spec.rpartition(":")[2] for spec in specs]
    return [f"{n}_{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


@dataclass
class RewardFunction:
    """One loaded reward function and how it is called."""

    spec: str
    what: str
    """The config field that named it (``task.reward_fn`` or ``task.reward_fns``)."""
    name: str
    """Its metric name (:func:`metric_names`)."""
    fn: Callable
    weight: float
    batch: bool
    """TRL's form (``trl_reward.takes_batch``): one call per batch."""
    calls: UserCalls
    shown: bool = False
    """Its first failure in this process was printed."""

    @classmethod
    def load(cls, spec: str, what: str, name: str, weight: float, timeout: float | None) -> RewardFunction:
        fn = load_reward_fn(spec, what)
        return cls(spec, what, name, fn, weight, takes_batch(fn), UserCalls(f"{what} {spec}", timeout,
                                                                            "task.reward_timeout_s"))

    def failed(self, err: BaseException, samples: int) -> None:
        """Print the first failure of this function in this run (``user_code.first_in_run``:
        of the processes that call it, only the first to fail shows it)."""
        if self.shown:
            return
        self.shown = True
        if not first_in_run(f"{self.what} {self.spec}"):
            return
        # the user's own exceptions arrive as UserCodeFailed; anything else is a check of the result
        text = format_failure(err) if isinstance(err, UserCodeFailed) else f"{type(err).__name__}: {err}\n"
        on = "a sample, which scores" if samples == 1 else f"a batch of {samples} samples, which score"
        print(f"{self.what} {self.spec} failed on {on} 0 from it (counted in reward_errors; only this "
              f"first failure is shown):\n{text}", file=sys.stderr, flush=True)


@dataclass
class Scores:
    """N samples scored by every function."""

    rewards: np.ndarray  # (N,) float32: Σ_f w_f r_f; NaN = no function scored it
    parts: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (N,) float32 r_f (NaN: None)
    errors: np.ndarray | None = None  # (N,) bool: a function failed on the sample
    part_errors: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (N,) bool: that function failed


class UserRewardTask:
    """``task`` with its reward replaced by the user's functions; counts what they could not score."""

    def __init__(self, task, functions: Sequence[RewardFunction]) -> None:
        self.inner, self.functions = task, list(functions)
        self.reward_errors = 0
        """Samples on which a reward function raised or returned a non-number (its reward 0)."""
        self.reward_none = 0
        """Samples no function scored (all returned ``None``): left out of the loss."""
        self._said_beyond = False

    def __getattr__(self, name: str):  # data, prompts and validation are the task's own
        if name == "inner":  # not yet set (unpickling): never recurse through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    def reward(self, completion_text: str, example: Example) -> float:
        """The user's reward of one sample as a float; NaN for "cannot be scored"."""
        return float(self.score_batch([completion_text], [example]).rewards[0])

    def score_batch(self, texts: Sequence[str], examples: Sequence[Example],
                    ids: Sequence[Sequence[int]] | None = None, state: TrainerState | None = None,
                    check: Callable[[], None] | None = None) -> Scores:
        """Sample i is ``texts[i]`` (token ids ``ids[i]``) answering ``examples[i]``: every
        function's reward of each, and their weighted sum (module doc). ``check`` runs before
        each call of user code (a stop raises there)."""
        fields = [reward_fields(self.inner, ex) for ex in examples]
        ids = ids if ids is not None else [None] * len(texts)
        parts = np.zeros((len(self.functions), len(texts)))  # (F, N)
        failed = np.zeros((len(self.functions), len(texts)), dtype=bool)  # (F, N)
        for f, fn in enumerate(self.functions):
            call = self._call_batch if fn.batch else self._call_each
            parts[f], failed[f] = call(fn, texts, fields, ids, state, check)
        errors = failed.any(axis=0)
        weights = np.array([fn.weight for fn in self.functions])[:, None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column is "not scored"
            total = np.where(np.isnan(parts).all(axis=0), np.nan, np.nansum(weights * parts, axis=0))
        beyond = np.abs(total) > REWARD_LIMIT  # weights can carry a sum past float32
        if beyond.any():
            self._beyond(int(beyond.sum()))
            total[beyond], errors = 0.0, errors | beyond
        self.reward_errors += int(errors.sum())
        self.reward_none += int(np.isnan(total).sum())
        return Scores(total.astype(np.float32), {fn.name: parts[f].astype(np.float32)
                                                 for f, fn in enumerate(self.functions)}, errors,
                      {fn.name: failed[f] for f, fn in enumerate(self.functions)})

    def _call_each(self, fn: RewardFunction, texts, fields, ids, state, check) -> tuple[np.ndarray, np.ndarray]:
        """A per-sample function on each sample: (N,) rewards (NaN for None), (N,) failed."""
        out, failed = np.zeros(len(texts)), np.zeros(len(texts), dtype=bool)
        for i, (text, kwargs) in enumerate(zip(texts, fields)):
            if check is not None:
                check()
            try:
                value = checked_reward(fn.calls.call(_per_sample, fn.fn, text, kwargs))
                out[i] = math.nan if value is None else value
            except TooManyStuck:
                raise
            except Exception as err:  # noqa: BLE001 - the user's code (BaseException arrives as UserCodeFailed)
                failed[i] = True
                fn.failed(err, 1)
        return out, failed

    def _call_batch(self, fn: RewardFunction, texts, fields, ids, state, check) -> tuple[np.ndarray, np.ndarray]:
        """A TRL-form function on all N samples in one call: (N,) rewards, (N,) failed."""
        if check is not None:
            check()
        prompts = [row["prompt"] for row in fields]
        kwargs = batch_kwargs(prompts, texts, ids, [{k: v for k, v in row.items() if k != "prompt"}
                                                    for row in fields], state)
        try:
            values = checked_batch(fn.calls.call(lambda: awaited(fn.fn(**kwargs))), len(texts))
        except TooManyStuck:
            raise
        except Exception as err:  # noqa: BLE001 - the user's code, or a result of the wrong shape
            fn.failed(err, len(texts))
            return np.zeros(len(texts)), np.ones(len(texts), dtype=bool)
        failed = np.array([isinstance(v, BatchEntryError) for v in values], dtype=bool)
        if failed.any():
            fn.failed(next(v for v in values if isinstance(v, BatchEntryError)), 1)
        return np.array([0.0 if isinstance(v, BatchEntryError) else v for v in values]), failed

    def _beyond(self, count: int) -> None:
        if not self._said_beyond:
            self._said_beyond = True
            print(f"task.reward_weights carry {count} samples' weighted reward beyond ±{REWARD_LIMIT:.3g} "
                  "(float32): they score 0, counted in reward_errors.", file=sys.stderr, flush=True)

    def check_call(self, example: Example) -> None:
        """``TypeError`` (one sentence) unless every function can be called with ``example``'s
        fields in its form: a signature that cannot would make every sample's reward an error."""
        fields = reward_fields(self.inner, example)
        for fn in self.functions:
            if fn.batch:
                kwargs = batch_kwargs([fields["prompt"]], [""], [[]],
                                      [{k: v for k, v in fields.items() if k != "prompt"}], None)
                form, rest = "NAME(prompts, completions, completion_ids, trainer_state, **columns)", "**kwargs"
            else:
                kwargs, form, rest = {"completion": "", **fields}, "NAME(completion, **fields)", "**fields"
            try:
                inspect.signature(fn.fn).bind(**kwargs)
            except TypeError as err:
                given = sorted(set(kwargs) - {"completion", "completions", "prompts", "completion_ids",
                                              "trainer_state"})
                raise TypeError(f"{fn.what} {fn.spec} cannot be called as {form} with the fields "
                                f"{', '.join(given)} ({err}); take {rest} to accept the columns it does "
                                "not use.") from None
            except ValueError:  # a callable without a signature: it is called as it is
                continue


def build_functions(specs: Sequence[str], weights: Sequence[float] | None, timeout: float | None,
                    what: str = "task.reward_fns") -> list[RewardFunction]:
    """The functions of ``specs`` with their ``weights`` (all 1 when None) and metric names."""
    weights = [1.0] * len(specs) if weights is None else list(weights)
    return [RewardFunction.load(spec, what, name, float(w), timeout)
            for spec, name, w in zip(specs, metric_names(specs), weights)]


def reward_part_metrics(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, float]:
    """``reward/<NAME>`` (mean of the function's rewards, None left out) and ``reward/<NAME>_std``
    over the groups' ``reward_parts``: TRL's ``rewards/<NAME>/mean`` and ``/std``; NaN when
    the function scored none."""
    out: dict[str, float] = {}
    for name in dict.fromkeys(k for p in parts for k in p):
        values = np.concatenate([p[name] for p in parts if name in p]).astype(np.float64)
        values = values[~np.isnan(values)]
        out[f"reward/{name}"] = float(values.mean()) if values.size else math.nan
        out[f"reward/{name}_std"] = float(values.std()) if values.size else math.nan
    return out
