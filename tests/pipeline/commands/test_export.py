"""``scalerl export --out`` never destroys: a new path or this run's earlier export, else one sentence.

The run is made by hand, not trained: a copy of the nano model as ``model.base``, a user's
data file and reward file, ``config.yaml`` and one checkpoint holding the base's weights
nudged, so an export takes a second and its weights are recognisably the checkpoint's.
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
import torch

from scalerl.checkpoint import save_checkpoint
from scalerl.cli import main
from scalerl.config import dump_config, load_config
from scalerl.models.export import EXPORT_MARKER

REWARD = "def score(completion, answer, **fields):\n    return float(answer in completion)\n"


def make_run(root: Path, nano_dir: Path, name: str = "run") -> Path:
    """A run folder under ``root`` whose inputs live in ``root/user``."""
    from scalerl.models.load import load_pretrained

    user = root / "user"
    if not user.exists():
        shutil.copytree(nano_dir, user / "base")
        (user / "data.jsonl").write_text("".join(json.dumps({"prompt": f"{a} add 1", "answer": str(a + 1)}) + "\n"
                                                 for a in range(8)))
        (user / "reward.py").write_text(REWARD)
    cfg = load_config("scalerl", [f"model.base={user / 'base'}", "task.name=dataset",
                                  f"task.knobs={{path: {user / 'data.jsonl'}, num_validation: 2}}",
                                  f"task.reward_fn={user / 'reward.py'}:score"])
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(cfg))
    model, _ = load_pretrained(user / "base")
    state = {k: v + 0.25 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    save_checkpoint(run, {"learner": {"model": state}}, {"step": 3})
    (run / "metrics.jsonl").write_text('{"step": 3}\n')
    return run


@pytest.fixture
def run(tmp_path, nano_dir):
    return make_run(tmp_path, nano_dir)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a folder (a link's target text)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = str(path.readlink()).encode() if path.is_symlink() else path.read_bytes() if path.is_file() else None
    return out


def export(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["export", *map(str, argv)])
    return rc, capsys.readouterr().err.strip()


def one_sentence(err: str, *words: str) -> None:
    assert "\n" not in err and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def test_export_writes_a_marker_and_replaces_only_its_own_earlier_export(run, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "exports" / "model"  # its parent is made too
    assert export(capsys, run, "--out", out)[0] == 0
    record = json.loads((out / EXPORT_MARKER).read_text())
    assert record["run"] == str(run.resolve()) and record["step"] == 3
    assert sorted(record["files"]) == sorted(p.name for p in out.iterdir())
    state = torch.load(run / "checkpoint" / "state.pt", weights_only=False)["learner"]["model"]
    loaded = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert all(torch.equal(loaded[k], state[k]) for k in loaded)  # the checkpoint's weights
    run_before = snapshot(run)
    assert export(capsys, run, "--out", out, "--dtype", "bfloat16")[0] == 0  # the same run: replaced
    assert AutoModelForCausalLM.from_pretrained(out, dtype="auto").dtype == torch.bfloat16
    assert [p.name for p in out.parent.iterdir()] == ["model"]  # no temporary or old folder beside it
    assert snapshot(run) == run_before  # the run is only read
    for _ in range(2):  # the default, RUN_DIR/model, is the run's own folder: written and rewritten
        assert export(capsys, run)[0] == 0
    assert (run / "model" / "config.json").is_file() and snapshot(run / "checkpoint") == {
        k.removeprefix("checkpoint/"): v for k, v in run_before.items() if k.startswith("checkpoint/")}


def _other_export(tmp_path, nano_dir, capsys) -> Path:
    other = make_run(tmp_path, nano_dir, "other-run")
    assert export(capsys, other, "--out", tmp_path / "theirs")[0] == 0
    return tmp_path / "theirs"


def _own_export_with_notes(tmp_path, run, capsys) -> Path:
    assert export(capsys, run, "--out", tmp_path / "mine")[0] == 0
    (tmp_path / "mine" / "notes.md").write_text("my notes on this model")
    return tmp_path / "mine"


def _folder_of_files(tmp_path) -> Path:
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "thesis.tex").write_text("\\section{Results}")
    return tmp_path / "thesis"


def _a_file(tmp_path) -> Path:
    (tmp_path / "notes.txt").write_text("do not lose this")
    return tmp_path / "notes.txt"


def _a_link(tmp_path) -> Path:
    (tmp_path / "link").symlink_to(tmp_path / "user" / "base")
    return tmp_path / "link"


REFUSED = {  # case: (the --out it names, words the sentence says)
    "the run folder": (lambda t, r: r, "is the run folder"),
    "the run's checkpoint": (lambda t, r: r / "checkpoint", "is inside the run folder"),
    "a new path inside the run": (lambda t, r: r / "exports" / "model", "is inside the run folder"),
    "a folder above the run": (lambda t, r: t, "contains the run folder"),
    "model.base": (lambda t, r: t / "user" / "base", "is model.base"),
    "a new path inside model.base": (lambda t, r: t / "user" / "base" / "sub", "is inside model.base"),
    "the data file": (lambda t, r: t / "user" / "data.jsonl", "is task.knobs.path"),
    "the reward file": (lambda t, r: t / "user" / "reward.py", "is task.reward_fn"),
    "the folder of the run's inputs": (lambda t, r: t / "user", "contains model.base"),
    "a folder of the user's files": (lambda t, r: _folder_of_files(t), "holding thesis.tex, not an export"),
    "an existing file": (lambda t, r: _a_file(t), "is a file"),
    "a symbolic link": (lambda t, r: _a_link(t), "is a symbolic link"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_target_export_would_destroy_is_refused_and_left_as_it_was(case, run, tmp_path, capsys):
    name, words = REFUSED[case]
    out = name(tmp_path, run)
    before = snapshot(tmp_path)
    rc, err = export(capsys, run, "--out", out)
    assert rc == 2
    one_sentence(err, f"--out {out}", words)
    assert snapshot(tmp_path) == before  # byte for byte, nothing added or taken


@pytest.mark.parametrize("case", ["another run's export", "this run's export holding the user's notes"])
def test_an_export_that_is_not_wholly_this_runs_is_refused(case, run, tmp_path, nano_dir, capsys):
    if case == "another run's export":
        out, words = _other_export(tmp_path, nano_dir, capsys), "is an export of another run"
    else:
        out, words = _own_export_with_notes(tmp_path, run, capsys), "also holds notes.md"
    before = snapshot(tmp_path)
    rc, err = export(capsys, run, "--out", out)
    assert rc == 2
    one_sentence(err, f"--out {out}", words)
    assert snapshot(tmp_path) == before


def test_an_empty_out_is_refused(run, capsys):
    with pytest.raises(SystemExit) as stop:  # a bad flag value: argparse's exit, code 2
        export(capsys, run, "--out", "")
    assert stop.value.code == 2
    one_sentence(capsys.readouterr().err.strip(), "--out", "the folder is empty")


def _fill_the_disk(monkeypatch):
    """The weights' write runs out of space halfway: a torn file, then ENOSPC."""
    import scalerl.models.export as export_module

    def full(model, state, dtype, directory):
        (Path(directory) / "model.safetensors").write_bytes(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device", str(directory / "model.safetensors"))

    monkeypatch.setattr(export_module, "_save_full", full)


def test_a_full_disk_leaves_the_earlier_export_and_nothing_else(run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "exports" / "model"
    assert export(capsys, run, "--out", out)[0] == 0
    before = snapshot(tmp_path)
    _fill_the_disk(monkeypatch)
    rc, err = export(capsys, run, "--out", out)
    assert rc == 2
    one_sentence(err, str(out), "no space is left")
    assert snapshot(tmp_path) == before  # the earlier export intact, no temporary beside it
    fresh = tmp_path / "new" / "deeper" / "model"
    rc, err = export(capsys, run, "--out", fresh)
    assert rc == 2 and not (tmp_path / "new").exists()  # the parents it made are gone again
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["under a file", "/proc/x"])
def test_an_unwritable_path_is_one_sentence(run, tmp_path, capsys, where):
    (tmp_path / "notes.txt").write_text("a file, where a folder would have to be made")
    before = snapshot(tmp_path)
    out = tmp_path / "notes.txt" / "model" if where == "under a file" else Path(where)
    rc, err = export(capsys, run, "--out", out)
    assert rc == 2
    one_sentence(err, f"cannot write the export to {out}", "nothing was written")
    assert snapshot(tmp_path) == before


def test_safetensors_io_errors_read_as_a_full_disk():
    from safetensors import SafetensorError

    from scalerl.pipeline.commands.export import write_failure

    err = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28) at path \"x\"")
    assert "no space is left" in write_failure(Path("out"), err)
    assert write_failure(Path("out"), ValueError("a bug")) is None  # not a write failure: re-raised


def test_a_torn_newest_checkpoint_is_said_and_the_older_one_exported(run, tmp_path, capsys):
    from scalerl.checkpoint import read_checkpoint

    state, _ = read_checkpoint(run)
    save_checkpoint(run, state, {"step": 5})  # step 3 becomes checkpoint.old
    newest = run / "checkpoint" / "state.pt"
    newest.write_bytes(newest.read_bytes()[:100])  # torn
    rc, err = export(capsys, run, "--out", tmp_path / "out")
    assert rc == 0
    lines = err.splitlines()
    assert lines[0].startswith("the newest checkpoint does not load (checkpoint/state.pt does not load"), err
    assert f"read the older {run / 'checkpoint.old'} at step 3 instead" in lines[0]
    assert lines[-1] == f"exported step 3 of {run}"
    assert json.loads((tmp_path / "out" / EXPORT_MARKER).read_text())["step"] == 3
