"""A user's own data: prompts and reference fields from JSONL, parquet or a ``datasets`` dir.

``task.name: dataset`` with ``task.knobs.path`` (and ``prompt_field``, ``prompt`` by
default). The prompt field holds a string or a list of chat messages; the model's chat
template renders either (``scalerl.models.chat``). Every other column of the record —
answer, solution, tests, anything — is kept and handed to the reward function
(``task.reward_fn``) as keyword arguments, with ``prompt`` (the record's prompt as written)
beside them. The validation split is a second file (``validation_path``) or a seeded
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

    def reward(self, completion_text: str, example: Example) -> float:
        raise TypeError("task 'dataset' is scored by task.reward_fn, and none is set")

    def demonstration(self, example: Example) -> str:
        """The record's ``demonstration_field`` (used only by the SFT warm-up of a built model)."""
        if self.demonstration_field is None:
            raise TypeError("task 'dataset' has no demonstrations: set task.knobs.demonstration_field, "
                            "or start from a trained model (model.base)")
        return str(example.meta["fields"][self.demonstration_field])


def reward_fields(task, example: Example) -> dict[str, Any]:
    """The keyword arguments a user's reward function gets for ``example``: the record's
    columns (a dataset task), or the answer and metadata of a built-in task; and ``prompt``,
    the prompt as the task gives it (a string or chat messages)."""
    fields = dict(example.meta.get("fields", ()))
    if not fields:
        fields = {"answer": example.answer,
                  **{k: v for k, v in example.meta.items() if k not in ("messages", "fields", "where")}}
    prompt: Prompt = task.prompt(example)
    return {**fields, "prompt": prompt}
