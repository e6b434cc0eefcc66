"""Other trainers' logs read with no column named (``fit.readers.trainers``), in the formats their
own code writes (read from their source: verl's file logger, prime-rl's file monitor, NeMo-RL's
and OpenRLHF's TensorBoard tags, TRL's ``trainer_state.json``); a W&B run's local folder through
the ``wandb`` package's own reader; a TensorBoard folder read while its writer appends."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.fit.forecast import read_logs
from scalerl.fit.readers import Columns, read_curves

from .._files import synthetic_curve, write_tb_events


def _curve(n=21):
    c, r = synthetic_curve(n=n, noise=0.01)
    return np.arange(n) * 10, r, np.clip(r + 0.05, 0, 1)  # steps, validation, a training reward above it


def test_a_verl_file_log_is_read_by_its_names(tmp_path):
    steps, val, train = _curve()
    path = tmp_path / "exp.jsonl"  # verl's FileLogger: {"step": N, "data": {...}}, the validation in the training line
    lines = [{"step": int(s), "data": {"critic/score/mean": float(t), "perf/total_num_tokens": 1000,
                                       "val-core/openai/gsm8k/acc/mean@1": float(v)}} for s, v, t in zip(steps, val, train)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (log,) = read_logs([path])
    assert log.curve.y == "val-core/openai/gsm8k/acc/mean@1" and log.curve.x == "step"
    assert log.train is not None and log.train.y == "critic/score/mean"
    assert np.allclose(log.curve.reward, val) and len(log.curve) == 21


def test_prime_rls_interleaved_lines_are_read_and_fit_needs_no_columns(tmp_path, capsys):
    steps, val, train = _curve()
    rows = []
    for s, v, t in zip(steps, val, train):  # the trainer's line, then the orchestrator's
        rows.append({"step": int(s), "time": 1.0 * s, "loss/mean": 0.1})
        rows.append({"step": int(s), "time": 1.0 * s, "train/agg/effective/agent/reward/mean": float(t),
                     "progress/total_tokens": 100 * int(s)})
        rows.append({"step": float(s), "eval/gsm8k/effective/agent/avg@4": float(v)})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (log,) = read_logs([tmp_path / "metrics.jsonl"])
    assert log.curve.y == "eval/gsm8k/effective/agent/avg@4" and log.train.y == "train/agg/effective/agent/reward/mean"
    assert main(["fit", str(tmp_path / "metrics.jsonl"), "--no-budget"]) == 0
    assert "eval/gsm8k/effective/agent/avg@4" in capsys.readouterr().out


@pytest.mark.parametrize(("trainer", "y_tag", "train_tag"), [("nemo-rl", "validation/accuracy", "train/reward"),
                                                             ("openrlhf", "eval/eval_default_pass1", "train/rollout/reward_mean")])
def test_nemo_rl_and_openrlhf_tensorboard_tags_are_read_by_their_names(tmp_path, trainer, y_tag, train_tag):
    steps, val, train = _curve()
    events = [e for s, v, t in zip(steps, val, train) for e in ((int(s), y_tag, float(v)), (int(s), train_tag, float(t)))]
    tb = write_tb_events(tmp_path / "tb", events)
    (curve,) = read_curves(tb, Columns(trainer=trainer))
    assert curve.y == y_tag and curve.x == "step" and np.allclose(curve.reward, val)
    (detected,) = read_curves(tb)  # the same without --from
    assert detected.y == y_tag


def test_trls_trainer_state_is_its_log_history(tmp_path):
    steps, val, train = _curve()
    history = []
    for s, v, t in zip(steps, val, train):
        history.append({"loss": 0.1, "reward": float(t), "num_tokens": 100.0 * s, "step": int(s)})
        history.append({"eval_reward": float(v), "eval_loss": 0.2, "step": int(s)})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": int(steps[-1]), "log_history": history}, indent=2))
    (log,) = read_logs([path])
    assert log.curve.y == "eval_reward" and log.train.y == "reward"  # TRL's training reward is not its validation
    assert np.allclose(log.curve.reward, val)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "trainer_state.json").write_text('{"global_step": 3}')
    with pytest.raises(Exception, match="has no log_history list"):
        read_logs([tmp_path / "bad" / "trainer_state.json"])


def test_an_offline_wandb_run_is_read_back_by_fit_with_no_network(tmp_path, capsys, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _, val, train = _curve()
    run = wandb.init(project="p", dir=str(tmp_path))
    for s, (v, t) in enumerate(zip(val, train)):
        run.log({"eval/accuracy": float(v), "train/reward": float(t)}, step=s)
    run.finish()
    (folder,) = (tmp_path / "wandb").glob("offline-run-*")
    assert main(["fit", str(folder), "--y", "eval/accuracy", "--no-budget"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "eval/accuracy" in out and "21 points" in out
    (log,) = read_logs([tmp_path / "wandb" / "latest-run"], Columns(y="eval/accuracy"))
    assert np.allclose(log.curve.reward, val, atol=1e-9) and log.train is not None and log.train.y == "train/reward"
    wb = next(folder.glob("*.wandb"))
    wb.write_bytes(b"not a wandb log at all")
    assert main(["fit", str(folder), "--y", "eval/accuracy", "--no-budget"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a W&B run's log W&B can read" in err and err.count("\n") == 0


def test_a_tensorboard_folder_is_read_while_its_writer_appends(tmp_path):
    import time

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    tb = tmp_path / "tb"
    _, val, _ = _curve(60)
    writer = EventFileWriter(str(tb))  # TensorBoard's own writer, as a trainer's logger uses it

    def scalar(tag, x, step):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(x))])
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    writer.add_scalar = scalar
    for s in range(8):
        writer.add_scalar("val_pass_rate", float(val[s]), s)
        writer.add_scalar("compute_gpu_hours", 0.01 * (s + 1), s)
    writer.flush()
    def append():
        for s in range(8, 60):
            scalar("compute_gpu_hours", 0.01 * (s + 1), s)
            scalar("val_pass_rate", float(val[s]), s)
            writer.flush()

    t = threading.Thread(target=append)
    t.start()
    seen = []
    try:
        for _ in range(20):
            (curve,) = read_curves(tb)  # a torn record at the end is read up to its last whole one
            seen.append(len(curve))
    finally:
        t.join()
        writer.close()
    assert all(n >= 8 for n in seen) and seen == sorted(seen)
    assert len(read_curves(tb)[0]) == 60
