"""Second built-in synthetic task: multi-digit times one-digit multiplication.

Prompt and demonstration::

    mul 347*6 =
    <think> 7*6+0=42 r2 4*6+4=28 r82 3*6+2=20 r2082 </think> 2082

The scratchpad mirrors addition's (``addition.py``): each column, right to left, writes
``digit * multiplier + carry = value`` and the running result; the last column prepends its
whole value. Same seeding, hash split and reward (first integer after the last ``</think>``).
"""

from __future__ import annotations

import numpy as np

from scalerl.data.tasks.addition import AdditionTask, addition_reward
from scalerl.data.tasks.base import RewardFn


def scratchpad(number: int, multiplier: int) -> str:
    """Column-by-column thinking text for ``number * multiplier`` (``multiplier`` one digit)."""
    digits = str(number)[::-1]
    carry, result, steps = 0, "", []
    for col, d in enumerate(digits):
        value = int(d) * multiplier + carry
        last = col == len(digits) - 1
        result = (str(value) if last else str(value % 10)) + result
        steps.append(f"{d}*{multiplier}+{carry}={value} r{result}")
        carry = value // 10
    return " ".join(steps)


class MultiplicationTask(AdditionTask):
    """Multiply a ``min_digits``-``max_digits``-digit number by one digit (2-9)."""

    name = "multiplication"
    symbol, verb = "*", "mul"

    def __init__(self, *, min_digits: int = 1, max_digits: int = 3, seed: int = 0,
                 num_train: int = 100_000, num_validation: int = 1200,
                 reward_fn: RewardFn = addition_reward) -> None:
        super().__init__(min_digits=min_digits, max_digits=max_digits, num_operands=2, seed=seed,
                         num_train=num_train, num_validation=num_validation, reward_fn=reward_fn)

    def _operands(self, rng: np.random.Generator) -> list[int]:
        n = int(rng.integers(self.min_digits, self.max_digits + 1))
        number = int(rng.integers(0 if n == 1 else 10 ** (n - 1), 10**n))
        return [number, int(rng.integers(2, 10))]

    def value(self, operands: list[int]) -> int:
        return operands[0] * operands[1]

    def thinking(self, operands: list[int]) -> str:
        return scratchpad(operands[0], operands[1])
