"""A user's own data: prompts and reference fields from JSONL, parquet or a ``datasets`` dir.

``task.name: dataset`` with ``task.knobs.path`` (and ``prompt_field``, ``prompt`` by
default). The prompt field holds a string or a list of chat messages; the model's chat
template renders either (``scalerl.models.chat``). Every other column of the record —
answer, solution, tests, anything — is kept and handed to the reward function
(``task.reward_fn``) as keyword arguments, with ``prompt`` (the record's prompt as written)
beside them. A column that only some rows have is None in the others, as Hugging Face
``datasets`` makes it (a JSONL file's rows need not share keys; a table's columns always do):
:attr:`DatasetTask.partial_columns` says which, so preflight can refuse a row without a column
a reward function names (``pipeline.preflight``) and the run can say the rest once
(:attr:`DatasetTask.columns_note`) instead of handing the reward an invisible default. The validation split is a second file (``validation_path``) or a seeded
held-out slice, as for the math task.

The task has no reward of its own: the user's reward function is the whole point, so a
run without ``task.reward_fn`` is refused when the config loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scalerl.data.tasks.base import Example, Prompt
from scalerl.data.tasks.records import FileTask
from scalerl.data.tasks.records import prompt_field as read_prompt


class DatasetTask(FileTask):
    """Prompts from a local file; scored only by the user's ``task.reward_fn``."""

    name = "dataset"

    def __init__(
        self,
        path: str | Path,
        *,
        prompt_field: str = "prompt",
        validation_path: str | Path | None = None,
        num_validation: int = 100,
        demonstration_field: str | None = None,
        seed: int = 0,
    ) -> None:
        fields = [prompt_field] + ([demonstration_field] if demonstration_field else [])
        self.prompt_field, self.demonstration_field = prompt_field, demonstration_field

        def to_example(i: int, rec: dict, where: str) -> Example:
            problem, meta = read_prompt(rec, prompt_field, where)
            meta["fields"] = {k: v for k, v in rec.items() if k != prompt_field}
            return Example(id=i, problem=problem, answer=str(rec.get("answer", "")), meta=meta)

        super().__init__(path, fields, to_example, validation_path=validation_path,
                         num_validation=num_validation, seed=seed, prompt_template="{problem}")
        rows = sorted([*map(self.train_example, range(self.num_train)), *self.validation()], key=_file_order)
        self.columns, self.partial_columns = fill_columns(rows)
        self.first_row = rows[0].meta["where"]
        """The file:line of the first row, for a sentence about a column no row has."""
        """Every column some row has, in order of first appearance (the prompt's left out), and
        of those the ones some rows lack: ``column -> (rows without it, the first one's file:line)``."""
        self.columns_note = partial_note(path, self.partial_columns, len(rows))
        """One sentence on the columns passed as None where a row lacks them, or None."""

    def reward(self, completion_text: str, example: Example) -> float:
        raise TypeError("task 'dataset' is scored by task.reward_fn, and none is set")

    def demonstration(self, example: Example) -> str:
        """The record's ``demonstration_field`` (used only by the SFT warm-up of a built model)."""
        if self.demonstration_field is None:
            raise TypeError("task 'dataset' has no demonstrations: set task.knobs.demonstration_field, "
                            "or start from a trained model (model.base)")
        return str(example.meta["fields"][self.demonstration_field])


def _file_order(example: Example) -> tuple[str, int]:
    """Sorts rows as their files hold them (``where`` ends in the line or row number), so the
    row a sentence names first is the first one in the file."""
    head, _, number = example.meta["where"].rpartition(" row ")
    if not _:
        head, _, number = example.meta["where"].rpartition(":")
    return head, int(number) if number.isdigit() else 0


def fill_columns(rows: list[Example]) -> tuple[list[str], dict[str, tuple[int, str]]]:
    """Every column of ``rows`` (their ``meta["fields"]``), and the ones some rows lack, which
    are set to None in those rows (as ``datasets`` does): ``column -> (count, first row's where)``."""
    columns = list(dict.fromkeys(k for row in rows for k in row.meta["fields"]))
    partial: dict[str, tuple[int, str]] = {}
    for row in rows:
        fields = row.meta["fields"]
        for column in columns:
            if column not in fields:
                count, first = partial.get(column, (0, row.meta["where"]))
                partial[column] = (count + 1, first)
                fields[column] = None
    return columns, partial


def partial_note(path: str | Path, partial: dict[str, tuple[int, str]], n_rows: int) -> str | None:
    """The once-per-run sentence about columns some rows lack (None when every row has every column)."""
    if not partial:
        return None
    each = "; ".join(f"{column!r} is missing from {count} of {n_rows} rows (the first {where})"
                     for column, (count, where) in partial.items())
    return (f"{path}: {each}; the reward functions get None there, as datasets passes a missing value "
            "(a function that names the column as a parameter without a default is refused instead).")


def required_columns(fn, batch: bool) -> list[str]:
    """The columns a reward function names as parameters without a default: a row must have each
    (the fields the trainer always passes, ``completion`` or TRL's ``prompts`` and the rest, left out)."""
    import inspect

    given = {"completions", "prompts", "completion_ids", "trainer_state"} if batch else {"completion", "prompt"}
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature names nothing
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.default is p.empty and p.name not in given]


def reward_fields(task, example: Example) -> dict[str, Any]:
    """The keyword arguments a user's reward function gets for ``example``: the record's
    columns (a dataset task: a row with only a prompt has none, never an invented ``answer=''``),
    or the answer and metadata of a built-in task; and ``prompt``, the prompt as the task gives
    it (a string or chat messages)."""
    fields = dict(example.meta.get("fields", ()))
    if "fields" not in example.meta:
        fields = {"answer": example.answer,
                  **{k: v for k, v in example.meta.items() if k not in ("messages", "fields", "where")}}
    prompt: Prompt = task.prompt(example)
    return {**fields, "prompt": prompt}
