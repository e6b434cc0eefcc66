"""The data-parallel learner (``learner.world_size > 1``): two gloo ranks on this CPU train
exactly what one process trains, through the real CLI; a stalled weight sync stops the run
with one sentence and a loadable checkpoint; a two-rank run on Ray resumes with one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_helpers import run_overrides

from scalerl.checkpoint import load_checkpoint

# serial: these tests start Ray or bind a rendezvous port; make test runs them after the parallel part
pytestmark = pytest.mark.serial


FAULTS = Path(__file__).with_name("rank_faults.py")


def _cli(run_dir, overrides: list[str], fault: str | None = None, resume: bool = False) -> subprocess.CompletedProcess:
    """``scalerl train``; with ``fault`` (``rank_faults.parse``'s form) injected into the ranks."""
    sets = [a for o in overrides for a in ("--set", o)]
    where = ["--resume", str(run_dir)] if resume else ["--recipe", "scalerl", "--out", str(run_dir)]
    command = [str(FAULTS), fault, "--"] if fault else ["-m", "scalerl"]
    return subprocess.run([sys.executable, *command, "train", *where, *sets, "--no-fit"],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _sync_run(model_dir, **extra) -> list[str]:
    """Two sync steps of eight groups (every rank gets four; eight, so a step with no group to
    train is unlikely whatever the warm model samples), evaluations cut to the bone. A training
    set of 1000 problems, not 100 000: ``scalerl train``'s preflight renders every prompt of it
    (~7 s per run on 2 cores for 100 000), and these runs draw at most 24."""
    return run_overrides(model_dir, **{
        "task.knobs": "{min_digits: 1, max_digits: 2, num_train: 1000}",
        "pipeline.mode": "sync", "pipeline.backend": "inprocess", "pipeline.prompts_per_step": 8,
        "pipeline.generations": 4, "pipeline.prompts_per_chunk": 8, "train.steps": 2, "eval.every": 100, "eval.schedule": "every",
        "eval.num_prompts": 4, "eval.k": 1, "optim.lr": "1e-4", "optim.warmup_steps": 0, **extra})


@pytest.fixture(scope="module")
def single(warm_model_dir, tmp_path_factory):
    """The single-process run the two-rank ones must match (in this process: the CLI path is
    the two-rank runs' to prove)."""
    from scalerl.config import load_config
    from scalerl.pipeline.run import train

    run = tmp_path_factory.mktemp("ws1") / "run"
    train(load_config("scalerl", _sync_run(warm_model_dir)), run, log=lambda *_: None)
    return _records(run)


@pytest.mark.parametrize("strategy", ["fsdp2", "ddp"])
def test_two_ranks_log_the_single_process_loss_and_grad_norm(single, warm_model_dir, tmp_path, strategy):
    """The fsdp2 run also goes on to a third step whose weight sync stalls (rank 1 hangs
    before its second bucket): it stops with one sentence naming them, and the checkpoint of
    step 2 loads."""
    run = tmp_path / "run"
    stall = strategy == "fsdp2"
    extra = {"train.steps": 3, "train.checkpoint_every": 1, "learner.sync_timeout_s": 5} if stall else {}
    done = _cli(run, _sync_run(warm_model_dir, **{"learner.world_size": 2, "learner.strategy": strategy,
                                                   "learner.sync_bucket_mb": 1, **extra}),
                fault="stall:1:2@3" if stall else None)
    if stall:
        _assert_stopped_at_the_stall(done, run)
    else:
        assert done.returncode == 0, done.stderr
    sharded = _records(run)
    steps = [r for r in single if r["step"] in (1, 2)]
    assert [r["step"] for r in steps] == [1, 2]
    for one, two in zip(steps, (r for r in sharded if r["step"] in (1, 2))):
        assert one["grad_norm"] > 0  # a step that trained: the test can fail
        assert two["learner_world_size"] == 2 and one["learner_world_size"] == 1
        for key in ("loss", "grad_norm"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key
        assert two["sync_bytes"] == one["sync_bytes"] > 0
        assert two["learner_rank_busy_s_max"] >= two["learner_rank_busy_s_min"] > 0


def _assert_stopped_at_the_stall(done: subprocess.CompletedProcess, run) -> None:
    """Version 3's sync stalled: exit 1, one sentence naming rank 1 and bucket 2, no traceback,
    and the newest checkpoint (step 2's) loads."""
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "policy version 3" in last and "learner rank 1 stalled at bucket 2" in last, last
    assert "Traceback" not in done.stderr and f"--resume {run}" in last
    state, meta = load_checkpoint(run, lambda _: None)
    assert meta["step"] == 2 and state["learner"]["version"] == 2


def test_two_ranks_on_ray_complete_and_resume_with_one(nano_dir, tmp_path):
    import logging

    import ray

    from scalerl.config import load_config
    from scalerl.pipeline.run import train
    from scalerl.runfolder import read_records

    # one generator and two single-thread ranks reserve three CPUs: logical ones, on two cores
    ray.init(num_cpus=3, include_dashboard=False, logging_level=logging.WARNING)
    try:
        def cfg(steps: int, world: int):
            return load_config("scalerl", run_overrides(nano_dir, **{
                "pipeline.backend": "ray", "pipeline.mode": "sync", "pipeline.prompts_per_step": 2,
                "pipeline.generations": 4, "pipeline.prompts_per_chunk": 2, "pipeline.num_generators": 1,
                "sampling.max_new_tokens": 24, "length.interrupt_range": "[12, 16]", "eval.num_prompts": 4,
                "eval.k": 1, "eval.every": 100, "eval.schedule": "every", "train.steps": steps, "train.checkpoint_every": 1,
                "learner.world_size": world, "learner.sync_bucket_mb": 1}))

        run = tmp_path / "run"
        train(cfg(2, 2), run, log=lambda *_: None)
        assert load_checkpoint(run, lambda _: None)[1]["step"] == 2
        last = train(cfg(3, 1), run, resume=True, log=lambda *_: None)
    finally:
        ray.shutdown()
    records = read_records(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3] and last["version"] == 3
    assert [r["learner_world_size"] for r in records[1:]] == [2, 2, 1]
    assert all(r["sync_bytes"] > 0 for r in records[1:])


@pytest.mark.parametrize(("kill", "checkpoint"), [("1:step@0", None), ("1:publish@2", 1)])
def test_a_killed_rank_stops_the_run_with_one_sentence_saying_whether_a_checkpoint_exists(
        warm_model_dir, tmp_path, kill, checkpoint):
    """Rank 1 SIGKILLs itself as the first step starts (no checkpoint yet), or halfway through
    the weight sync of step 2 (which comes before that step's checkpoint: step 1's is the newest):
    exit 1, no traceback, one sentence naming rank 1 and the newest checkpoint or its absence."""
    run = tmp_path / "run"
    done = _cli(run, _sync_run(warm_model_dir, **{"learner.world_size": 2, "learner.strategy": "fsdp2",
                                                  "learner.sync_bucket_mb": 1, "train.steps": 3,
                                                  "train.checkpoint_every": 1}),
                fault=f"kill:{kill}")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("scalerl train: learner rank 1 died (killed by SIGKILL); "), last
    if checkpoint is None:
        assert last.endswith("no checkpoint was written before this, so the run starts over."), last
        assert load_checkpoint(run, lambda _: None) is None
    else:
        assert last.endswith(f"the newest checkpoint (step {checkpoint}) is in {run}: continue with "
                             f"`scalerl train --resume {run}`."), last
        assert load_checkpoint(run, lambda _: None)[1]["step"] == checkpoint
