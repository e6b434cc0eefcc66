"""Math task: (problem, answer) records from JSONL, parquet or a ``datasets`` directory.

The reward follows digest §2.1: strip the think block (keep the text after the last
``</think>``), then check the final answer against the reference with Math-Verify
(``parse`` + ``verify``), so ``1/2``, ``0.5`` and ``\\frac{1}{2}`` all count. The reward is
in {0, 1}; pass ``reward_fn=plus_minus_one(math_reward)`` for the paper's ±1.

Field names are configurable. The problem field holds a string (put into the prompt
template) or a list of chat messages (given to the model's chat template as they are). The validation split is either a second file or a seeded
held-out slice of the training file; problems whose text appears in validation are removed
from training, so the splits never overlap.
"""

from __future__ import annotations

import threading
from pathlib import Path

from scalerl.data.tasks.base import Example, RewardFn, strip_thinking
from scalerl.data.tasks.records import FileTask, prompt_field

DEFAULT_PROMPT = (
    "Solve the problem. Think step by step inside <think> </think>, then write the final "
    "answer as \\boxed{{...}}.\n\nProblem: {problem}\n"
)


def _verify_kwargs() -> dict:
    # Math-Verify's timeouts use SIGALRM, which only works on the main thread.
    on_main = threading.current_thread() is threading.main_thread()
    return {} if on_main else {"parsing_timeout": None}


def math_reward(completion_text: str, example: Example) -> float:
    """1.0 iff Math-Verify finds the answer after the last ``</think>`` equal to the reference."""
    from math_verify import parse, verify

    solution = strip_thinking(completion_text)
    if not solution.strip():
        return 0.0
    kw = _verify_kwargs()
    gold = parse(f"${example.answer}$", **kw) or parse(example.answer, **kw)
    pred = parse(solution, **kw)
    if not gold or not pred:
        return 0.0
    timeout = {} if not kw else {"timeout_seconds": None}
    return float(verify(gold, pred, **timeout))


class MathTask(FileTask):
    """Verifiable math problems from a local file; answers checked with Math-Verify."""

    name = "math"

    def __init__(
        self,
        path: str | Path,
        *,
        problem_field: str = "problem",
        answer_field: str = "answer",
        solution_field: str | None = None,
        validation_path: str | Path | None = None,
        num_validation: int = 100,
        prompt_template: str = DEFAULT_PROMPT,
        seed: int = 0,
        reward_fn: RewardFn = math_reward,
    ) -> None:
        fields = [problem_field, answer_field] + ([solution_field] if solution_field else [])

        def to_example(i: int, rec: dict, where: str) -> Example:
            problem, meta = prompt_field(rec, problem_field, where)
            if solution_field:
                meta["solution"] = str(rec[solution_field])
            return Example(id=i, problem=problem, answer=str(rec[answer_field]), meta=meta)

        super().__init__(path, fields, to_example, validation_path=validation_path,
                         num_validation=num_validation, seed=seed, prompt_template=prompt_template)
        self.reward_fn = reward_fn

    def reward(self, completion_text: str, example: Example) -> float:
        return float(self.reward_fn(completion_text, example))

    def demonstration(self, example: Example) -> str:
        """``<think> {solution} </think> \\boxed{answer}`` (empty thinking without a solution)."""
        thinking = example.meta.get("solution", "")
        return f"<think> {thinking} </think> \\boxed{{{example.answer}}}"
