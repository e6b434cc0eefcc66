"""forecast.prior_runs.run_prior and prior_spec: the one prior a run's forecast is made under, wherever
it is made (the trainer's live record, serve, plan, fit), learned again only when its runs change."""

from __future__ import annotations

import json
import os

import pytest

from scalerl.fit import FitOptions
from scalerl.fit.errors import CurveError, CurveWarning
from scalerl.fit.forecast.prior_runs import prior_spec, run_prior
from scalerl.fit.readers import Columns

from ..prior.test_train_prior import _records, _write

OPTIONS = FitOptions(max_points=200)
COLUMNS = Columns(x="compute_gpu_hours", y="val_pass_rate")


def _study(tmp_path, n: int = 6):
    """``n`` finished run folders, and a new run's folder beside them (its log cut at a quarter)."""
    for i in range(n):
        (tmp_path / f"run{i}").mkdir()
        _write(tmp_path / f"run{i}" / "metrics.jsonl", _records(i + 1))
    (tmp_path / "new").mkdir()
    _write(tmp_path / "new" / "metrics.jsonl", _records(50)[:100])
    return tmp_path / "new"


def test_the_runs_own_folder_is_never_part_of_its_prior_and_its_writes_learn_nothing_again(tmp_path):
    new = _study(tmp_path)
    first = run_prior(str(tmp_path), OPTIONS, COLUMNS, exclude=(new,))
    assert first[2] == 6 and first[0] is not None
    _write(new / "metrics.jsonl", _records(50)[:200])  # the run goes on writing beneath the prior's folder
    assert run_prior(str(tmp_path), OPTIONS, COLUMNS, exclude=(new,)) is first  # kept, not learned again
    # without the exclusion the run's own log would be a seventh run of its prior
    assert run_prior(str(tmp_path), OPTIONS, COLUMNS)[2] == 7


def test_a_copy_of_the_run_elsewhere_is_left_out_for_that_run_only(tmp_path):
    """The copy test reads the run's curve, so a prior kept for one run is never another's."""
    from scalerl.fit.forecast.log import read_log_file

    new = _study(tmp_path)
    (tmp_path / "copy").mkdir()
    _write(tmp_path / "copy" / "metrics.jsonl", _records(50))  # the new run's whole log, under another name
    (run,) = read_log_file(new)
    with pytest.warns(CurveWarning):
        mine = run_prior(str(tmp_path), OPTIONS, COLUMNS, exclude=(new,), curves=(run.curve,))
    assert mine[2] == 6  # the copy left out
    assert run_prior(str(tmp_path), OPTIONS, COLUMNS, exclude=(new,))[2] == 7  # another run's prior has it


def test_a_finished_run_added_to_the_prior_is_learned_again(tmp_path):
    new = _study(tmp_path)
    first = run_prior(str(tmp_path), OPTIONS, COLUMNS, exclude=(new,))
    (tmp_path / "run6").mkdir()
    _write(tmp_path / "run6" / "metrics.jsonl", _records(7))
    again = run_prior(str(tmp_path), OPTIONS, COLUMNS, exclude=(new,))
    assert again is not first and again[2] == 7


def test_no_spec_is_no_prior():
    assert run_prior(None, OPTIONS, COLUMNS) is None


def test_prior_spec_reads_the_flag_first_then_the_run_folders_config(tmp_path):
    cfg = {"forecast": {"prior_runs": "../done"}}
    assert prior_spec(cfg, None, tmp_path / "new") == (str(tmp_path / "new" / "../done"),
                                                       f"{tmp_path / 'new' / 'config.yaml'}: forecast.prior_runs")
    assert prior_spec(cfg, "elsewhere", tmp_path) == ("elsewhere", "--prior-runs")
    assert prior_spec(cfg, "none", tmp_path) == (None, "--prior-runs")  # even where the folder names one
    assert prior_spec({"forecast": {"target": 0.5}}, None, tmp_path)[0] is None
    assert prior_spec({"forecast": {"prior_runs": "~/runs"}})[0] == os.path.expanduser("~/runs")


@pytest.mark.parametrize("value", [3, "", ["a"]])
def test_a_prior_runs_that_is_not_a_path_is_one_sentence(tmp_path, value):
    with pytest.raises(CurveError) as err:
        prior_spec({"forecast": {"prior_runs": value}}, None, tmp_path)
    assert str(err.value) == (f"{tmp_path / 'config.yaml'}: forecast.prior_runs is {value!r}, not a folder, file or "
                              "glob of finished runs.")


def test_fit_on_a_run_folder_uses_its_configured_prior_as_the_flag_would(tmp_path):
    from scalerl.cli import main

    new = _study(tmp_path)
    (new / "config.yaml").write_text(json.dumps({"forecast": {"prior_runs": str(tmp_path)}}))  # YAML holds JSON

    def forecast(*flags) -> dict:
        assert main(["fit", str(new), "--no-budget", *flags, "--json", str(tmp_path / "fit.json")]) == 0
        (run,) = json.loads((tmp_path / "fit.json").read_text())["runs"]
        return run["forecast"]

    configured = forecast()
    assert "6 prior runs" in configured["why"]  # learned from the six, the run's own folder left out
    assert configured == forecast("--prior-runs", str(tmp_path))
    assert "prior" not in forecast("--prior-runs", "none")["why"]


def test_a_folder_of_scalerl_runs_gives_each_run_once_never_its_tensorboard_copy(tmp_path):
    """A run folder holds its log and a TensorBoard mirror of it (``tb/``, written by a real
    ``SummaryWriter`` here): the prior reads the log once; another trainer's TensorBoard folder
    beside them is a run of its own."""
    from torch.utils.tensorboard import SummaryWriter

    from scalerl.fit.forecast.prior_runs import find_prior_files, load_prior

    new = _study(tmp_path, n=6)
    for folder in [tmp_path / f"run{i}" / "tb" for i in range(6)] + [tmp_path / "openrlhf" / "logs"]:
        writer = SummaryWriter(str(folder))
        for s in range(10, 101, 10):  # as scalerl's sink mirrors a record: its compute and validation
            writer.add_scalar("compute_gpu_hours", 1e-3 * s, s)
            writer.add_scalar("val_pass_rate", 0.1 + 0.004 * s, s)
        writer.close()
    (tmp_path / "run0" / "samples.jsonl").write_text('{"step": 1, "completion": "12"}\n')
    found = find_prior_files(str(tmp_path))
    assert found == [new / "metrics.jsonl", *(tmp_path / f"run{i}" / "metrics.jsonl" for i in range(6)),
                     tmp_path / "openrlhf" / "logs"]
    # the readers' own column choice (as ``--prior-runs`` with no columns): 6 runs and the other trainer's, not 13
    assert load_prior(str(tmp_path), OPTIONS, exclude=(new,))[2] == 7


def _trl_history(seed: int, last: int) -> list[dict]:
    """A TRL log up to step ``last``: its training reward every step, ``eval_reward`` every 10."""
    rows = []
    for r in _records(seed):
        if 0 < r["step"] <= last:
            rows.append({"step": r["step"], "reward": r["reward_mean"], "loss": 0.1})
            if "val_pass_rate" in r:
                rows.append({"step": r["step"], "eval_reward": r["val_pass_rate"]})
    return rows


def test_another_trainers_runs_are_read_once_each_trl_state_and_wandb_folder(tmp_path, monkeypatch):
    """A TRL run's output folder holds a ``trainer_state.json`` in every checkpoint (each a copy
    of the log up to then), and its own at the end only where ``save_state`` was called; a W&B
    run's local folder holds its ``.wandb`` log. Each is one run of the prior, as ``serve``
    lists it: the newest checkpoint's state where the run has none of its own, never the rest."""
    wandb = pytest.importorskip("wandb")
    from transformers import TrainerState

    from scalerl.fit.forecast.prior_runs import find_prior_files, load_prior

    new = _study(tmp_path, n=2)
    for name, own in (("trl_a", False), ("trl_b", True)):
        for last in (100, 200, 300) if not own else (100, 300):
            out = tmp_path / name / (f"checkpoint-{last}" if (not own or last < 300) else "")
            out.mkdir(parents=True, exist_ok=True)
            TrainerState(global_step=last, max_steps=300, log_history=_trl_history(7 if own else 8, last)).save_to_json(
                str(out / "trainer_state.json"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="p", dir=str(tmp_path / "wb"))
    for r in _records(9):
        run.log({k: v for k, v in r.items() if k != "step"}, step=r["step"])
    run.finish()
    (wb,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    found = find_prior_files(str(tmp_path))
    assert found == [new / "metrics.jsonl", *(tmp_path / f"run{i}" / "metrics.jsonl" for i in range(2)),
                     tmp_path / "trl_a" / "checkpoint-300" / "trainer_state.json",
                     tmp_path / "trl_b" / "trainer_state.json", wb]
    assert load_prior(str(tmp_path), OPTIONS, exclude=(new,))[2] == 5  # 2 scalerl runs, 2 TRL runs, 1 W&B run
