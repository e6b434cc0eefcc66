"""Built-in synthetic reasoning task: multi-digit addition with a column-by-column scratchpad.

Prompt and target completion (the demonstration used by SFT)::

    add 4821+379 =
    <think> 1+9+0=10 r0 2+7+1=10 r00 8+3+1=12 r200 4+0+1=5 r5200 </think> 5200

Each column, right to left, writes ``digits + carry-in = column sum`` and then the running
result ``r…`` (the new digit prepended to the previous one; the last column prepends its whole
sum). Every step is local, so a 1-3M-parameter model can learn it, yet the thinking block is
long enough (about 12 tokens per column) for forced interruptions (digest §2.9) and length
truncation to bite. The answer is the first integer after the last ``</think>``.

Default difficulty (1-3 digits, 2 operands): a ~1M-parameter model (``nano``) gets from 0 to
a 0.1-0.4 sampled pass rate in roughly 200 SFT steps (about a minute on 2 busy CPU cores),
and the mix of easy 1-digit and hard 3-digit carries leaves headroom for RL.

Problems are generated on the fly, deterministically from ``(seed, split, index)``; a problem
belongs to validation iff its text hashes into the validation fraction, so the splits never
overlap, whatever the seed.
"""

from __future__ import annotations

import numpy as np

from scalerl.data.tasks.base import (
    Example,
    RewardFn,
    first_integer,
    in_validation_split,
    strip_thinking,
)

VALIDATION_FRACTION = 0.1
"""Share of the problem space reserved for validation by the hash split."""


def addition_reward(completion_text: str, example: Example) -> float:
    """1.0 iff the first integer after the last ``</think>`` equals ``example.answer``, else 0.0."""
    got = first_integer(strip_thinking(completion_text))
    return float(got is not None and got == int(example.answer))


def scratchpad(operands: list[int]) -> str:
    """The column-addition thinking text (without the ``<think>`` tags) for ``operands``."""
    digits = [str(x)[::-1] for x in operands]
    width = max(len(d) for d in digits)
    carry, result, steps = 0, "", []
    for col in range(width):
        column = [int(d[col]) if col < len(d) else 0 for d in digits]
        total = sum(column) + carry
        last = col == width - 1
        result = (str(total) if last else str(total % 10)) + result
        steps.append("+".join(map(str, [*column, carry])) + f"={total} r{result}")
        carry = total // 10
    return " ".join(steps)


class AdditionTask:
    """Add ``num_operands`` numbers of ``min_digits``-``max_digits`` digits each."""

    name = "addition"

    def __init__(
        self,
        *,
        min_digits: int = 1,
        max_digits: int = 3,
        num_operands: int = 2,
        seed: int = 0,
        num_train: int = 100_000,
        num_validation: int = 1200,
        reward_fn: RewardFn = addition_reward,
    ) -> None:
        if not 1 <= min_digits <= max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {min_digits}, {max_digits}")
        if num_operands < 2:
            raise ValueError(f"num_operands must be at least 2, got {num_operands}")
        self.min_digits, self.max_digits = min_digits, max_digits
        self.num_operands, self.seed = num_operands, seed
        self.num_train, self.num_validation = num_train, num_validation
        self.reward_fn = reward_fn
        self._validation: list[Example] | None = None

    def _operands(self, rng: np.random.Generator) -> list[int]:
        out = []
        for _ in range(self.num_operands):
            n = int(rng.integers(self.min_digits, self.max_digits + 1))
            lo = 0 if n == 1 else 10 ** (n - 1)
            out.append(int(rng.integers(lo, 10**n)))
        return out

    # Subclasses (multiplication.py) change these four to pose another column-wise operation.
    symbol, verb = "+", "add"

    def value(self, operands: list[int]) -> int:
        return sum(operands)

    def thinking(self, operands: list[int]) -> str:
        return scratchpad(operands)

    def _example(self, split: int, i: int) -> Example:
        # Rejection-sample until the problem lands in the requested side of the hash split.
        for attempt in range(10_000):
            rng = np.random.default_rng([self.seed, split, i, attempt])
            ops = self._operands(rng)
            problem = self.symbol.join(map(str, ops))
            if in_validation_split(problem, VALIDATION_FRACTION) == (split == 1):
                return Example(id=i, problem=problem, answer=str(self.value(ops)),
                               meta={"operands": tuple(ops)})
        raise RuntimeError(f"could not draw a split-{split} {self.name} problem; widen the digits")

    def train_example(self, i: int) -> Example:
        if not 0 <= i < self.num_train:
            raise IndexError(f"train index {i} outside [0, {self.num_train})")
        return self._example(0, i)

    def validation(self) -> list[Example]:
        """``num_validation`` iid draws from the task's distribution restricted to the held-out
        side of the hash split. Problems repeat when the space is small (1–2 digits: ~1,000
        held-out problems, the 1-digit ones drawn far more often than any 2-digit one), in
        proportion to their probability, so the mean pass rate estimates the pass rate on
        the distribution training draws from, and each draw is an independent unit of the
        standard error. Keeping only distinct problems would over-weight the rare ones: on
        1–2 digits, a set of all ~1,000 distinct problems is almost all 2-digit sums."""
        if self._validation is None:
            self._validation = [self._example(1, i) for i in range(self.num_validation)]
        return self._validation

    def prompt(self, example: Example) -> str:
        return f"{self.verb} {example.problem} ="

    def reward(self, completion_text: str, example: Example) -> float:
        return float(self.reward_fn(completion_text, example))

    def demonstration(self, example: Example) -> str:
        """The target completion, EOS excluded (the tokenizer's EOS ends it in SFT)."""
        return f"<think> {self.thinking(list(example.meta['operands']))} </think> {example.answer}"
