"""Math task: (problem, answer) records from JSONL, parquet or a ``datasets`` directory.

The reward follows digest §2.1: strip the think block (keep the text after the last
``</think>``), then check the final answer against the reference with Math-Verify
(``parse`` + ``verify``), so ``1/2``, ``0.5`` and ``\\frac{1}{2}`` all count. The reward is
in {0, 1}; pass ``reward_fn=plus_minus_one(math_reward)`` for the paper's ±1.

Field names are configurable. The validation split is either a second file or a seeded
held-out slice of the training file; problems whose text appears in validation are removed
from training, so the splits never overlap.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scalerl.data.tasks.base import Example, RewardFn, strip_thinking

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


def _check_fields(record: dict, fields: Sequence[str], where: str) -> None:
    for f in fields:
        if f not in record:
            raise KeyError(f"{where}: missing field {f!r} (fields present: {sorted(record)})")


def _read_jsonl(path: Path, fields: Sequence[str]) -> list[dict]:
    out = []
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            _check_fields(rec, fields, f"{path}:{n}")
            out.append(rec)
    return out


def _read_table(rows: list[dict], columns: Sequence[str], fields: Sequence[str], where: str):
    missing = [f for f in fields if f not in columns]
    if missing:
        raise KeyError(f"{where}: missing field {missing[0]!r} (fields present: {sorted(columns)})")
    return rows


def load_records(path: str | Path, fields: Sequence[str]) -> list[dict]:
    """Records (dicts) from ``.jsonl``, ``.parquet`` or a ``datasets.save_to_disk`` directory.

    Every record must carry ``fields``; the error names the file (and line for JSONL).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_dir():
        import datasets

        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if "train" not in ds:
                raise KeyError(f"{path}: dataset has no 'train' split (splits: {sorted(ds)})")
            ds = ds["train"]
        return _read_table(ds.to_list(), ds.column_names, fields, str(path))
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        return _read_table(table.to_pylist(), table.column_names, fields, str(path))
    if path.suffix in (".jsonl", ".json"):
        return _read_jsonl(path, fields)
    raise ValueError(f"{path}: unsupported format; use .jsonl, .parquet or a datasets directory")


class MathTask:
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
        records = [self._example(i, r, problem_field, answer_field, solution_field)
                   for i, r in enumerate(load_records(path, fields))]
        if validation_path is not None:
            val = [self._example(i, r, problem_field, answer_field, solution_field)
                   for i, r in enumerate(load_records(validation_path, fields))]
        else:
            order = np.random.default_rng(seed).permutation(len(records))
            held = set(order[: min(num_validation, len(records) // 2)].tolist())
            val = [records[i] for i in sorted(held)]
            records = [r for i, r in enumerate(records) if i not in held]
        val_problems = {e.problem for e in val}
        train = [r for r in records if r.problem not in val_problems]
        if not train:
            raise ValueError(f"{path}: no training problems left after holding out validation")
        self._train = [Example(i, e.problem, e.answer, e.meta) for i, e in enumerate(train)]
        self._validation = [Example(i, e.problem, e.answer, e.meta) for i, e in enumerate(val)]
        self.num_train = len(self._train)
        self.prompt_template = prompt_template
        self.reward_fn = reward_fn

    @staticmethod
    def _example(i, rec, problem_field, answer_field, solution_field) -> Example:
        meta = {"solution": str(rec[solution_field])} if solution_field else {}
        return Example(id=i, problem=str(rec[problem_field]), answer=str(rec[answer_field]),
                       meta=meta)

    def train_example(self, i: int) -> Example:
        return self._train[i]

    def validation(self) -> list[Example]:
        return self._validation

    def prompt(self, example: Example) -> str:
        return self.prompt_template.format(problem=example.problem)

    def reward(self, completion_text: str, example: Example) -> float:
        return float(self.reward_fn(completion_text, example))

    def demonstration(self, example: Example) -> str:
        """``<think> {solution} </think> \\boxed{answer}`` (empty thinking without a solution)."""
        thinking = example.meta.get("solution", "")
        return f"<think> {thinking} </think> \\boxed{{{example.answer}}}"
