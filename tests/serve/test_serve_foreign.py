"""``scalerl serve`` lists other trainers' logs beside scalerl's runs (``serve.foreign``): TRL's
``trainer_state.json`` (its newest checkpoint's where the run's folder has none) and a
TensorBoard folder a real ``SummaryWriter`` wrote, each with its state and its one forecast,
the numbers ``scalerl plan`` gives on the same log."""

from __future__ import annotations

import json
import math
import os
import time

import pytest
from serve_runs import write_run

from scalerl.cli import main

WAIT = 120.0  # a bound on a busy machine, never a time asserted


def _history(steps: int, every: int = 10) -> list[dict]:
    """A rising TRL log: the training reward every step, ``eval_reward`` every ``every``."""
    rows = []
    for s in range(1, steps + 1):
        rows.append({"step": s, "reward": 0.2 + 0.5 * (1 - math.exp(-s / 40)), "loss": 0.1})
        if s % every == 0:
            rows.append({"step": s, "eval_reward": 0.15 + 0.5 * (1 - math.exp(-s / 40)) + 0.01 * ((s // every) % 2)})
    return rows


def _trl(folder, steps=100, max_steps=300):
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"max_steps": max_steps, "log_history": _history(steps)}))
    return folder / "trainer_state.json"


def test_a_trl_state_is_listed_beside_a_scalerl_run_with_plans_forecast(tmp_path, served):
    write_run(tmp_path / "ours")
    state = _trl(tmp_path / "trl-run")
    _trl(tmp_path / "trl-run" / "checkpoint-50", steps=50)  # a copy of the state up to then: not a run
    old = _trl(tmp_path / "only-checkpoints" / "checkpoint-20", steps=20)
    newest = _trl(tmp_path / "only-checkpoints" / "checkpoint-100", steps=100)
    past = time.time() - 3600  # an hour quiet: finished
    for p in (state, old, newest):
        os.utime(p, (past, past))
    server = served()
    runs = {f.id: f for f in server.discover() if f.kind == "run"}
    assert set(runs) == {"ours", "trl-run", "only-checkpoints/checkpoint-100"}
    assert runs["trl-run"].log == state and runs["ours"].log is None
    s = server.summary(runs["trl-run"], wait=WAIT)
    assert s["state"] == "finished" and s["val"] == pytest.approx(_history(100)[-1]["eval_reward"])
    assert s["forecast"]["budget"] == 300.0  # the trainer's own max_steps
    assert main(["plan", str(state), "--target", "0.6", "--json", str(tmp_path / "plan.json")]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    at = plan["at_budget"]
    assert [s["forecast"][k] for k in ("median", "lo", "hi")] == pytest.approx(
        [at["value"], at["pred_lo"], at["pred_hi"]], abs=1e-12)
    page = server.detail(runs["trl-run"], wait=WAIT)
    assert page["units"]["compute"] == "step" and page["resume"] is None and page["source"] == str(state)
    assert page["validation"]["step"] == [float(s) for s in range(10, 101, 10)]


def test_a_tensorboard_folder_being_written_is_a_running_run(tmp_path, served):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "nemo" / "logs"))
    for s in range(1, 61):
        writer.add_scalar("train/reward", 0.2 + 0.5 * (1 - math.exp(-s / 30)), s)
        if s % 10 == 0:
            writer.add_scalar("validation/accuracy", 0.1 + 0.5 * (1 - math.exp(-s / 30)), s)
    writer.flush()
    now = time.time()
    for event in (tmp_path / "nemo" / "logs").iterdir():  # written just now: a busy machine's slow start does not count
        os.utime(event, (now, now))
    server = served()
    (found,) = [f for f in server.discover() if f.kind == "run"]
    assert found.id == "nemo/logs" and found.log == tmp_path / "nemo" / "logs"
    s = server.summary(found, wait=WAIT)
    assert s["state"] == "running" and s["val"] == pytest.approx(0.1 + 0.5 * (1 - math.exp(-2)), abs=1e-6)
    writer.close()


def test_an_unreadable_trainer_state_is_one_sentence_and_the_rest_still_serve(tmp_path, served):
    write_run(tmp_path / "ours")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "trainer_state.json").write_text("{not json")
    server = served()
    runs = {f.id: f for f in server.discover() if f.kind == "run"}
    bad = server.summary(runs["bad"], wait=WAIT)
    assert bad["state"] == "unreadable" and "trainer_state.json" in bad["state_detail"]
    assert server.summary(runs["ours"], wait=WAIT)["state"] == "finished"


def test_another_trainers_tb_folder_is_a_run_and_a_scalerl_runs_own_copies_are_not(tmp_path, served, monkeypatch):
    """``tb/`` and ``wandb/`` inside a scalerl run are copies of its log (one run, one answer);
    a folder of the same name elsewhere is another trainer's log (``runfolder.walk``)."""
    import wandb
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    write_run(tmp_path / "ours")
    run = wandb.init(project="p", dir=str(tmp_path / "ours"))  # as ``log.wandb`` puts it
    run.log({"val_pass_rate": 0.3}, step=1)
    run.finish()
    for folder in (tmp_path / "ours" / "tb", tmp_path / "openrlhf" / "tb", tmp_path / "nemo" / "model"):
        writer = SummaryWriter(str(folder))
        for s in range(10, 61, 10):
            writer.add_scalar("eval/accuracy", 0.1 + 0.005 * s, s)
        writer.close()
    assert list((tmp_path / "ours" / "wandb").rglob("*.wandb"))  # the copy the walk must pass by
    found = {f.id: f.log for f in served().discover() if f.kind == "run"}
    assert found == {"ours": None, "openrlhf/tb": tmp_path / "openrlhf" / "tb", "nemo/model": tmp_path / "nemo" / "model"}
