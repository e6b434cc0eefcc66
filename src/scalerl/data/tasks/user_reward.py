"""A user's reward function (``task.reward_fn: FILE.py:NAME | package.module:NAME``).

It is called as ``NAME(completion: str, **fields) -> float | None`` with the example's fields
(``scalerl.data.tasks.dataset.reward_fields``: a dataset record's columns, or a built-in
task's answer and metadata) and ``prompt``. It replaces the task's own reward; everything
else about the task (data, prompts, validation) stays.

- ``None`` means "cannot be scored": the sample is counted in ``reward_none`` and left out
  of the loss and of its group's statistics (``pipeline.batch``).
- An exception inside the function, ``BaseException`` included (``SystemExit``,
  ``KeyboardInterrupt``), is caught per sample: the sample scores 0, is counted in
  ``reward_errors``, and the first traceback of each process is printed once (a policy that
  found the input that breaks the function will find it again and again).
- So is a call that runs past ``task.reward_timeout_s``: it is abandoned on its worker
  thread (``scalerl.user_code``: too many still running stop the run with one sentence).
- A result that is not a finite real number (within float32's range: rewards travel as
  float32) is an error of the same kind (``data.tasks.base.checked_reward``).

The function is loaded from its spec in every process that scores (generators, local and
Ray alike, and the learner's evaluation), so nothing about it has to be picklable.
"""

from __future__ import annotations

import math
import sys
import traceback

from scalerl.data.tasks.base import Example, checked_reward
from scalerl.data.tasks.dataset import reward_fields
from scalerl.plugins import check_parameter, load
from scalerl.user_code import TooManyStuck, UserCalls, UserCodeFailed, format_failure


def load_reward_fn(spec: str):
    """The function named by ``spec``, checked to take a ``completion`` argument
    (``PluginError``, one sentence, otherwise)."""
    fn = load(spec, "task.reward_fn")
    check_parameter(fn, "completion", spec, "task.reward_fn")
    return fn


class UserRewardTask:
    """``task`` with its reward replaced by the user's function; counts what it could not score."""

    def __init__(self, task, fn, spec: str, timeout: float | None = None) -> None:
        """``timeout``: seconds a call may take (``task.reward_timeout_s``); None: no limit."""
        self.inner, self.fn, self.spec = task, fn, spec
        self.calls = UserCalls(f"task.reward_fn {spec}", timeout, "task.reward_timeout_s")
        self.reward_errors = 0
        """Samples whose reward function raised or returned a non-number (scored 0)."""
        self.reward_none = 0
        """Samples the function declined to score (``None``): left out of the loss."""

    def __getattr__(self, name: str):  # data, prompts and validation are the task's own
        if name == "inner":  # not yet set (unpickling): never recurse through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    def reward(self, completion_text: str, example: Example) -> float:
        """The user's reward as a float; NaN for "cannot be scored" (``None``)."""
        try:
            value = self.calls.call(lambda: self.fn(completion=completion_text, **reward_fields(self.inner, example)))
            value = checked_reward(value)
            if value is None:
                self.reward_none += 1
                return math.nan
            return value
        except TooManyStuck:
            raise
        except Exception as err:  # noqa: BLE001 - the user's code (BaseException arrives as UserCodeFailed)
            self.reward_errors += 1
            if self.reward_errors == 1:
                text = format_failure(err) if isinstance(err, UserCodeFailed) else traceback.format_exc()
                print(f"task.reward_fn {self.spec} failed on a sample, which scores 0 (counted in "
                      f"reward_errors; only this first failure is shown):\n{text}", file=sys.stderr, flush=True)
            return 0.0
