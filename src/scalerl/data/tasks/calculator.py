"""Built-in tool-use task: multi-digit arithmetic the tiny models cannot do in their head,
with a calculator they can call (``calculator_env.CalculatorEnv``).

An episode, with the environment's observation in brackets (masked from the loss)::

    mul 347*62 =
    <calc>347*62</calc>[<result>21514</result>] 21514

The model writes a tool call ``<calc>EXPR</calc>`` (the turn ends at ``</calc>``,
``env.stop_strings``), the calculator answers ``<result>VALUE</result>``, and the model's
next turn is its answer: the first integer of the turn that does not call the tool. The
model has to learn to copy the problem into the call and the result into its answer; a
2-3 digit product is out of reach without the tool (a nano model's pass rate is ~0 there).

Problems are drawn as ``addition``'s are: deterministically from ``(seed, split, index)``,
validation by a hash split that never overlaps training. Without an environment the task
still scores a completion (the first integer after the last ``</result>``), so it also runs
single-turn, where the model cannot get help.
"""

from __future__ import annotations

import numpy as np

from scalerl.data.tasks.base import Example, first_integer, in_validation_split

VALIDATION_FRACTION = 0.1
VERBS = {"+": "add", "-": "sub", "*": "mul"}
"""The operations and the word each prompt starts with (single tokens of the task tokenizer)."""
CALL_OPEN, CALL_CLOSE = "<calc>", "</calc>"
RESULT_OPEN, RESULT_CLOSE = "<result>", "</result>"


def answer_of(text: str) -> int | None:
    """The final answer: the first integer after the last tool result (or in the whole text)."""
    head, sep, tail = text.rpartition(RESULT_CLOSE)
    return first_integer(tail if sep else text)


class CalculatorTask:
    """``a OP b`` with ``min_digits``-``max_digits``-digit operands, OP drawn from ``operations``."""

    name = "calculator"

    def __init__(self, *, min_digits: int = 2, max_digits: int = 3, operations: str = "*", seed: int = 0,
                 num_train: int = 100_000, num_validation: int = 600) -> None:
        if not 1 <= min_digits <= max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {min_digits}, {max_digits}")
        if not operations or set(operations) - set(VERBS):
            raise ValueError(f"operations must be some of {''.join(VERBS)!r}, got {operations!r}")
        self.min_digits, self.max_digits, self.operations = min_digits, max_digits, operations
        self.seed, self.num_train, self.num_validation = seed, num_train, num_validation
        self._validation: list[Example] | None = None

    def _number(self, rng: np.random.Generator) -> int:
        n = int(rng.integers(self.min_digits, self.max_digits + 1))
        return int(rng.integers(0 if n == 1 else 10 ** (n - 1), 10**n))

    def _example(self, split: int, i: int) -> Example:
        for attempt in range(10_000):  # rejection-sample into the requested side of the split
            rng = np.random.default_rng([self.seed, split, i, attempt])
            a, b = self._number(rng), self._number(rng)
            op = self.operations[int(rng.integers(len(self.operations)))]
            problem = f"{a}{op}{b}"
            if in_validation_split(problem, VALIDATION_FRACTION) == (split == 1):
                value = a + b if op == "+" else a - b if op == "-" else a * b
                return Example(id=i, problem=problem, answer=str(value), meta={"prompt": f"{VERBS[op]} {problem} ="})
        raise RuntimeError("could not draw a calculator problem on this side of the split; widen the digits")

    def train_example(self, i: int) -> Example:
        if not 0 <= i < self.num_train:
            raise IndexError(f"train index {i} outside [0, {self.num_train})")
        return self._example(0, i)

    def validation(self) -> list[Example]:
        if self._validation is None:
            self._validation = [self._example(1, i) for i in range(self.num_validation)]
        return self._validation

    def prompt(self, example: Example) -> str:
        return example.meta["prompt"]

    def reward(self, completion_text: str, example: Example) -> float:
        """1.0 iff the final answer (:func:`answer_of`) equals the value, else 0.0."""
        got = answer_of(completion_text)
        return float(got is not None and got == int(example.answer))

    def demonstration_turns(self, example: Example) -> list[tuple[str, bool]]:
        """The episode SFT imitates, as ``(text, trained)`` pieces: the tool call, the
        calculator's answer (not trained: the environment writes it), the final answer."""
        return [(f"{CALL_OPEN}{example.problem}{CALL_CLOSE}", True),
                (f"{RESULT_OPEN}{example.answer}{RESULT_CLOSE}", False), (f" {example.answer}", True)]

    def demonstration(self, example: Example) -> str:
        """The whole episode as one text (EOS excluded)."""
        return "".join(text for text, _ in self.demonstration_turns(example))
