"""Read (problem, answer/tests) records from JSONL, parquet or a ``datasets`` directory.

Shared by the math and code tasks. Errors name the file (and line for JSONL) and the
missing field in one sentence.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from scalerl.data.tasks.base import Example, Prompt, check_prompt


def _check_fields(record: dict, fields: Sequence[str], where: str) -> None:
    for f in fields:
        if f not in record:
            raise KeyError(f"{where}: missing field {f!r} (fields present: {sorted(record)})")


def _read_jsonl(path: Path, fields: Sequence[str]) -> list[tuple[str, dict]]:
    """Records of a JSONL (or one-record-per-line ``.json``) file; a UTF-8 byte-order mark is
    allowed, as ``fit`` allows it. Every refusal names the file and line."""
    out = []
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            line = _decode_line(raw[3:] if n == 1 and raw.startswith(codecs.BOM_UTF8) else raw, f"{path}:{n}")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            except RecursionError:
                raise ValueError(f"{path}:{n}: lists and objects nest too deep to read") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: a record must be a JSON object, not a {type(rec).__name__}")
            _check_fields(rec, fields, f"{path}:{n}")
            out.append((f"{path}:{n}", rec))
    return out


def _decode_line(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})") from None


def _check_columns(columns: Sequence[str], fields: Sequence[str], where: str) -> None:
    missing = [f for f in fields if f not in columns]
    if missing:
        raise KeyError(f"{where}: missing field {missing[0]!r} (fields present: {sorted(columns)})")


def load_records(path: str | Path, fields: Sequence[str]) -> list[dict]:
    """Records (dicts) from ``.jsonl``, ``.parquet`` or a ``datasets.save_to_disk`` directory.

    Every record must carry ``fields``; the error names the file (and line for JSONL).
    """
    return [rec for _, rec in load_located(path, fields)]


def load_located(path: str | Path, fields: Sequence[str]) -> list[tuple[str, dict]]:
    """:func:`load_records`, each record with where it came from (``file:line`` for JSONL,
    ``file: row N`` otherwise), for errors about one record's contents."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if not path.is_dir() and not path.is_file():  # /dev/zero, a pipe: an endless read, never records
        raise ValueError(f"{path}: not a regular file (a device, pipe or socket), so it holds no records")
    if path.is_dir():
        import datasets

        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if "train" not in ds:
                raise KeyError(f"{path}: dataset has no 'train' split (splits: {sorted(ds)})")
            ds = ds["train"]
        _check_columns(ds.column_names, fields, str(path))
        rows = ds.to_list()
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        _check_columns(table.column_names, fields, str(path))
        rows = table.to_pylist()
    elif path.suffix in (".jsonl", ".json"):
        return _read_jsonl(path, fields)
    else:
        raise ValueError(f"{path}: unsupported format; use .jsonl, .parquet or a datasets directory")
    return [(f"{path}: row {i + 1}", rec) for i, rec in enumerate(rows)]


def split_train_validation(
    train: list[Example], validation: list[Example] | None, num_validation: int, seed: int,
    where: str,
) -> tuple[list[Example], list[Example]]:
    """Disjoint (train, validation), both re-indexed from 0.

    Without an explicit ``validation`` list, a seeded ``num_validation`` slice of ``train`` is
    held out (at most half). Train problems whose text appears in validation are dropped.
    """
    if not train:
        raise ValueError(f"{where}: the file holds no records")
    if validation is None:
        order = np.random.default_rng(seed).permutation(len(train))
        held = set(order[: min(num_validation, len(train) // 2)].tolist())
        validation = [train[i] for i in sorted(held)]
        train = [e for i, e in enumerate(train) if i not in held]
    val_problems = {e.problem for e in validation}
    train = [e for e in train if e.problem not in val_problems]
    if not train:
        raise ValueError(f"{where}: no training problems left after holding out validation")

    def reindex(examples: list[Example]) -> list[Example]:
        return [Example(i, e.problem, e.answer, e.meta) for i, e in enumerate(examples)]

    return reindex(train), reindex(validation)


def split_note(path: str | Path, n_records: int, validation_path: str | Path | None, n_validation: int,
               n_train: int, num_validation: int, seed: int) -> str:
    """Which records validate and which train, and the knobs that change it, in one sentence."""
    dropped = n_records - n_train - (0 if validation_path is not None else n_validation)
    why = "its prompt is also a validation prompt" if dropped == 1 else "their prompts are also validation prompts"
    also = f" ({dropped} more dropped: {why})" if dropped else ""
    if validation_path is not None:
        return (f"validation: the {_records(n_validation)} of {validation_path} (task.knobs.validation_path); "
                f"training on {n_train} of the {_records(n_records)} of {path}{also}.")
    return (f"validation: {n_validation} of the {_records(n_records)} of {path} are held out, a random slice "
            f"drawn with task.knobs.seed={seed} (task.knobs.num_validation={num_validation}, at most half the "
            f"file), and {n_train} train{also}; change it with task.knobs.num_validation, or name a validation "
            "file in task.knobs.validation_path.")


def _records(n: int) -> str:
    return "1 record" if n == 1 else f"{n} records"


class FileTask:
    """The file-backed half of a task (math, code): examples, held-out split and prompt.

    ``to_example(i, record, where)`` turns one record into an ``Example`` (``where`` is the
    record's file and line, for errors); subclasses add
    ``reward`` and ``demonstration``.
    """

    def __init__(
        self,
        path: str | Path,
        fields: Sequence[str],
        to_example: Callable[[int, dict, str], Example],
        *,
        validation_path: str | Path | None,
        num_validation: int,
        seed: int,
        prompt_template: str,
    ) -> None:
        def read(file: str | Path) -> list[Example]:  # meta["where"]: the record's file and line, for errors
            return [located(to_example(i, rec, where), where) for i, (where, rec) in enumerate(load_located(file, fields))]

        records = read(path)
        val = read(validation_path) if validation_path is not None else None
        self._train, self._validation = split_train_validation(records, val, num_validation, seed, str(path))
        self.num_train = len(self._train)
        self.validation_note = split_note(path, len(records), validation_path, len(self._validation),
                                          self.num_train, num_validation, seed)
        """One sentence on where the validation prompts come from; ``scalerl train`` prints it."""
        self.prompt_template = prompt_template

    def train_example(self, i: int) -> Example:
        return self._train[i]

    def validation(self) -> list[Example]:
        return self._validation

    def prompt(self, example: Example) -> Prompt:
        """The problem in the task's template, or a record's chat messages as they are."""
        messages = example.meta.get("messages")
        if messages is not None:
            return [dict(m) for m in messages]
        return self.prompt_template.format(problem=example.problem)


def located(example: Example, where: str) -> Example:
    """``example`` with ``meta["where"]`` (its record's file and line), which checks name."""
    return replace(example, meta={**example.meta, "where": where})


def prompt_field(record: dict, name: str, where: str) -> tuple[str, dict]:
    """``(problem, meta)`` of a record's prompt field: a string is the problem itself; a list
    of chat messages rides in ``meta["messages"]``, and its JSON text is the problem (what
    the validation split compares and the log shows); anything else is one sentence."""
    value = check_prompt(record[name], f"{where}: field {name!r}")
    if isinstance(value, str):
        return value, {}
    return json.dumps(value, ensure_ascii=False), {"messages": tuple(dict(m) for m in value)}
