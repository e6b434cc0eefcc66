import json

import pytest

from scalerl.data.tasks.base import Example
from scalerl.data.tasks.math import MathTask
from scalerl.data.tasks.records import load_records, split_train_validation


def _rows(n):
    return [{"question": f"{i} + {i} = ?", "final": str(2 * i)} for i in range(n)]


def test_jsonl_reads_records_and_skips_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(_rows(2)[0]) + "\n\n" + json.dumps(_rows(2)[1]) + "\n")
    assert [r["final"] for r in load_records(path, ["question", "final"])] == ["0", "2"]
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"d.jsonl:1: not valid JSON"):
        load_records(path, ["question"])


def test_split_is_seeded_disjoint_and_drops_duplicates():
    exs = [Example(i, f"p{i % 8}", str(i)) for i in range(10)]  # p0, p1 appear twice
    train, val = split_train_validation(exs, None, 3, seed=0, where="x")
    assert len(val) == 3 and not {e.problem for e in train} & {e.problem for e in val}
    assert [e.id for e in train] == list(range(len(train)))
    again, _ = split_train_validation(exs, None, 3, seed=0, where="x")
    assert again == train


def test_parquet_and_datasets_directory(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = _rows(8)
    pq.write_table(pa.Table.from_pylist(rows[:3]), tmp_path / "val.parquet")
    assert load_records(tmp_path / "val.parquet", ["question", "final"])[2]["final"] == "4"
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    task = MathTask(tmp_path / "ds", problem_field="question", answer_field="final",
                    validation_path=tmp_path / "val.parquet")
    # The 3 validation problems also sit in the training directory: they are dropped there.
    assert len(task.validation()) == 3 and task.num_train == 5
    assert task.train_example(0).problem == "3 + 3 = ?"


def test_missing_field_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n')
    with pytest.raises(KeyError, match=r"bad.jsonl:2: missing field 'answer'"):
        load_records(path, ["problem", "answer"])
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"problem": "x"}]), tmp_path / "bad.parquet")
    with pytest.raises(KeyError, match=r"bad.parquet: missing field 'answer'"):
        load_records(tmp_path / "bad.parquet", ["problem", "answer"])
    with pytest.raises(ValueError, match="unsupported format"):
        (tmp_path / "x.csv").write_text("a")
        load_records(tmp_path / "x.csv", ["problem"])


def test_a_utf8_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(2)), encoding="utf-8-sig")
    assert [r["final"] for r in load_records(path, ["question", "final"])] == ["0", "2"]


@pytest.mark.parametrize("line, words", [
    (b'{"question": "caf\xff", "final": "1"}', r"bad.jsonl:2: not UTF-8 \(byte 0xff at column 18\)"),
    (b'{"question": ' + b"[" * 100_000 + b"]" * 100_000 + b', "final": "1"}',
     r"bad.jsonl:2: lists and objects nest too deep to read"),
])
def test_an_unreadable_line_is_named(tmp_path, line, words):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(_rows(1)[0]).encode() + b"\n" + line + b"\n")
    with pytest.raises(ValueError, match=words):
        load_records(path, ["question", "final"])


def test_a_device_is_not_read(tmp_path):
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")  # an endless line: it would fill the memory
    with pytest.raises(ValueError, match=r"zero.jsonl: not a regular file"):
        load_records(tmp_path / "zero.jsonl", ["question"])


def test_an_empty_file_says_so(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"empty.jsonl: the file holds no records"):
        MathTask(tmp_path / "empty.jsonl", problem_field="question", answer_field="final")


def test_the_split_is_said_in_one_sentence_with_the_knobs_that_change_it(tmp_path):
    path, val = tmp_path / "d.jsonl", tmp_path / "v.jsonl"
    rows = _rows(9) + [_rows(1)[0]]  # record 10 repeats record 1's problem
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # seed 2 holds out records 0, 2 and 7 (numpy's permutation): record 9, record 0's twin, leaves training
    task = MathTask(path, problem_field="question", answer_field="final", num_validation=3, seed=2)
    assert task.validation_note == (
        f"validation: 3 of the 10 records of {path} are held out, a random slice drawn with task.knobs.seed=2 "
        "(task.knobs.num_validation=3, at most half the file), and 6 train (1 more dropped: its prompt is also "
        "a validation prompt); change it with task.knobs.num_validation, or name a validation file in "
        "task.knobs.validation_path.")
    val.write_text(json.dumps(rows[0]) + "\n")  # the repeated problem: both its copies leave training
    task = MathTask(path, problem_field="question", answer_field="final", validation_path=val)
    assert task.validation_note == (
        f"validation: the 1 record of {val} (task.knobs.validation_path); training on 8 of the 10 records of "
        f"{path} (2 more dropped: their prompts are also validation prompts).")
