"""``train.max_minutes`` is the whole run's limit, resumes included (``pipeline.time_limit``):
it once restarted with every ``--resume``, while the records' ``wall_s`` counted on."""

from __future__ import annotations

import pytest

from scalerl.checkpoint import load_checkpoint, save_checkpoint
from scalerl.config import load_config
from scalerl.pipeline import time_limit
from scalerl.runfolder import read_records


def test_the_deadline_is_the_limit_less_what_the_run_spent():
    assert time_limit.deadline(None, 100.0, now=5.0) is None
    assert time_limit.deadline(2.0, 0.0, now=5.0) == pytest.approx(125.0)  # a fresh run: the whole 120 s
    assert time_limit.deadline(2.0, 90.0, now=5.0) == pytest.approx(35.0)  # a resume after 90 s: 30 s left
    assert time_limit.deadline(2.0, 150.0, now=5.0) == pytest.approx(-25.0)  # spent: in the past


def test_a_spent_limit_is_said_with_the_override_that_goes_on():
    assert time_limit.spent(None, 10**6) is None and time_limit.spent(2.0, 119.0) is None
    line = time_limit.spent(2.0, 150.0)
    assert line.startswith("train.max_minutes=2 is the whole run's limit and its earlier sessions spent 2.5 minutes "
                           "(wall_s 150 s), so nothing more is trained")
    assert "--set train.max_minutes=MINUTES" in line and "train.max_minutes=null" in line


TINY = {"pipeline.backend": "inprocess", "train.checkpoint_every": 100, "eval.num_prompts": 2, "eval.k": 1,
        "eval.every": 100, "eval.schedule": "every", "pipeline.prompts_per_step": 2, "pipeline.generations": 2, "length.control": "none",
        "sampling.max_new_tokens": 4, "forecast.enabled": "false", "log.progress": "false",
        "log.tensorboard": "false", "train.cores": 2}


def _cfg(nano_dir, **extra):
    return load_config("scalerl", [f"{k}={v}" for k, v in ({"model.base": nano_dir} | TINY | extra).items()])


def _spend(run, seconds: float) -> None:
    """As if the run's earlier sessions had taken ``seconds`` up to its checkpoint."""
    state, meta = load_checkpoint(run)
    state["compute"]["wall_s"] = seconds
    save_checkpoint(run, state, meta)


def test_a_resume_gets_what_the_earlier_sessions_left_of_the_limit(nano_dir, tmp_path):
    from scalerl.pipeline.run import train

    run = tmp_path / "run"
    train(_cfg(nano_dir, **{"train.steps": 2, "train.max_minutes": "null"}), run, log=lambda *a: None)
    said: list[str] = []
    _spend(run, 600.0)  # 10 minutes of a 10-minute limit: nothing is left
    assert train(_cfg(nano_dir, **{"train.steps": 4, "train.max_minutes": 10}), run, resume=True,
                 log=said.append) == {}
    assert [r["step"] for r in read_records(run / "metrics.jsonl")] == [0, 1, 2]
    assert any(line.startswith("train.max_minutes=10 is the whole run's limit") for line in said), said
    _spend(run, 599.999)  # a millisecond left: the first step passes it, and the run ends there
    last = train(_cfg(nano_dir, **{"train.steps": 4, "train.max_minutes": 10}), run, resume=True,
                 log=lambda *a: None)
    assert last["step"] == 3 and last["wall_s"] > 600.0  # the records' clock is the limit's
    assert load_checkpoint(run)[1]["step"] == 3
