"""Crash safety with a real ``kill -9``: resume finishes the run, metrics stay contiguous."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from pipeline_helpers import run_overrides

from scalerl.checkpoint import load_checkpoint
from scalerl.compute import ComputeMeter
from scalerl.metrics import JsonlSink, read_records, truncate_after
from scalerl.pipeline.evaluation import OrderedRecords
from scalerl.pipeline.steps import checkpoint
from scalerl.types import EvalResult

STEPS = 10


def _train(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "scalerl.cli", "train", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def _last_step(run: Path) -> int:
    records = read_records(run / "metrics.jsonl")  # whole lines only: a torn one is skipped
    return int(records[-1]["step"]) if records else -1


def _wait_until(done, proc: subprocess.Popen, what: str, limit_s: float = 600.0) -> None:
    """Poll until ``done()``; a dead run fails at once, a hung one after a generous bound."""
    deadline = time.monotonic() + limit_s
    while not done():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"{what} not within {limit_s:.0f} s: the run hangs"
        time.sleep(0.05)


def _all_gone(pids: list[int], limit_s: float = 60.0) -> bool:
    """True as soon as none of ``pids`` is alive; False if some still are after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_sigkill_then_resume_completes_with_contiguous_metrics(warm_model_dir, tmp_path):
    run = tmp_path / "run"
    overrides = run_overrides(warm_model_dir, **{
        "pipeline.backend": "local", "train.steps": STEPS, "train.checkpoint_every": 3,
        "eval.every": 4, "eval.schedule": "every", "eval.num_prompts": 3, "eval.k": 2, "pipeline.prompts_per_step": 4,
        "pipeline.generations": 4, "log.tensorboard": "true",
        "train.max_minutes": "null"})  # no wall-clock stop: a slow machine must not end it early
    sets = [a for o in overrides for a in ("--set", o)]
    proc = _train(["--recipe", "scalerl", *sets, "--out", str(run), "--no-fit"])
    _wait_until(lambda: (run / "checkpoint" / "meta.json").exists(), proc, "a first checkpoint")
    # Kill once the log shows a random step after the first checkpoint, at least 5 steps
    # before the end: the kill point is an event the test observes, not a sleep racing the
    # run, so a slow machine only makes the wait longer. Should a run ever finish in the
    # moment between seeing that step and the kill, there is nothing to resume: that is a
    # skip of this case, never a failure.
    target = random.randint(3, STEPS - 5)
    _wait_until(lambda: _last_step(run) >= target, proc, f"step {target}")
    generators = _children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    code = proc.wait()
    if code == 0:
        pytest.skip(f"the run finished between step {target} and the kill: nothing to resume")
    assert code == -signal.SIGKILL, proc.stderr.read()
    state, meta = load_checkpoint(run)  # never corrupt: a complete checkpoint is always there
    assert meta["step"] >= 3 and state["learner"]["version"] == meta["step"]
    # orphaned generators notice the dead parent within a second or so; 60 s is the bound
    assert _all_gone(generators), [pid for pid in generators if _alive(pid)]

    resumed = _train(["--resume", str(run), "--no-fit"])
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()  # a hang bound, not a speed one
    steps = [r["step"] for r in read_records(run / "metrics.jsonl")]
    assert steps == list(range(STEPS + 1))
    _, meta = load_checkpoint(run)
    assert meta["step"] == STEPS
    compute = [r["compute_gpu_hours"] for r in read_records(run / "metrics.jsonl")]
    assert all(b > a for a, b in zip(compute, compute[1:]))  # compute spent carries over the crash


def test_resume_without_a_checkpoint_starts_over_cleanly(warm_model_dir, tmp_path):
    from scalerl.config import load_config
    from scalerl.pipeline.run import train

    cfg = load_config("scalerl", run_overrides(warm_model_dir, **{
        "pipeline.backend": "inprocess", "train.steps": 2, "eval.every": 1, "eval.schedule": "every", "eval.num_prompts": 2,
        "eval.k": 1, "pipeline.prompts_per_step": 2, "pipeline.generations": 2}))
    train(cfg, tmp_path)
    for path in (tmp_path / "checkpoint").iterdir():  # as if killed before the first checkpoint
        path.unlink()
    (tmp_path / "checkpoint").rmdir()
    train(cfg, tmp_path, resume=True)
    assert [r["step"] for r in read_records(tmp_path / "metrics.jsonl")] == [0, 1, 2]


def test_a_truncated_newest_checkpoint_resumes_from_the_older_one(nano_dir, tmp_path):
    from scalerl.config import load_config
    from scalerl.pipeline.run import train

    def cfg(steps: int):
        return load_config("scalerl", [f"{k}={v}" for k, v in {
            "model.base": nano_dir, "pipeline.backend": "inprocess", "train.steps": steps,
            "train.checkpoint_every": 2, "eval.every": 2, "eval.schedule": "every", "eval.num_prompts": 1, "eval.k": 1,
            "pipeline.prompts_per_step": 1, "pipeline.generations": 2, "length.control": "none",
            "sampling.max_new_tokens": 4, "forecast.enabled": "false", "log.progress": "false",
            "log.tensorboard": "false"}.items()])

    train(cfg(4), tmp_path, log=lambda _: None)
    newest = tmp_path / "checkpoint" / "state.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # a torn write
    said: list[str] = []
    train(cfg(6), tmp_path, resume=True, log=said.append)
    assert any("checkpoint/state.pt does not load" in s and "at step 2 instead" in s for s in said), said
    assert [r["step"] for r in read_records(tmp_path / "metrics.jsonl")] == list(range(7))
    assert load_checkpoint(tmp_path)[1]["step"] == 6


def _pickled_modules(path: Path) -> set[str]:
    """The modules whose classes or functions ``path`` (a ``torch.save`` file) names."""
    import pickle
    from types import SimpleNamespace as Module

    found: set[str] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            found.add(module)
            return super().find_class(module, name)

    torch.load(path, map_location="cpu", weights_only=False,
               pickle_module=Module(Unpickler=Recording, load=pickle.load, __name__="pickle"))
    return found


def test_a_checkpoint_names_no_module_that_can_move(nano_dir, tmp_path):
    """A checkpoint is tensors, numpy arrays, plain containers and the wire records of
    ``scalerl.types`` (queued groups, undelivered prompts): it names no class of
    ``scalerl.pipeline``, so moving the pipeline's modules (issue 40) cannot break a resume.
    (A checkpoint written before that move, by the code of ``main`` then, was resumed by hand
    with the moved code: step 3 -> 5, the log contiguous.)"""
    from scalerl.config import load_config
    from scalerl.pipeline.run import train

    cfg = load_config("scalerl", [f"{k}={v}" for k, v in {
        "model.base": nano_dir, "pipeline.backend": "inprocess", "train.steps": 2,
        "train.checkpoint_every": 2, "eval.every": 2, "eval.schedule": "every", "eval.num_prompts": 1, "eval.k": 1,
        "pipeline.prompts_per_step": 1, "pipeline.generations": 2, "length.control": "none",
        "sampling.max_new_tokens": 4, "forecast.enabled": "false", "log.progress": "false",
        "log.tensorboard": "false"}.items()])
    train(cfg, tmp_path, log=lambda _: None)
    ours = {m for m in _pickled_modules(tmp_path / "checkpoint" / "state.pt") if m.split(".")[0] == "scalerl"}
    assert ours <= {"scalerl.types"}


class _LaggingEvaluation:
    """Evaluations on a 'generator' that come back when the test delivers them; each submit
    returns the weight snapshot it evaluates, as ``GeneratorEvaluation`` does."""

    def __init__(self) -> None:
        self.submitted, self.out = {}, []

    def submit(self, step, version, model):
        weights = torch.full((2,), float(step))
        self.resubmit(step, version, weights)
        return weights

    def resubmit(self, step, version, weights):
        self.submitted[step] = weights

    def results(self, timeout=0.0):
        out, self.out = self.out, []
        return out

    def deliver(self, step):
        weights = self.submitted.pop(step)
        self.out.append(EvalResult(step, step, {"val_pass_rate": float(weights[0]) / 100}, 10, 0.1, 1))


def _parts(run: Path, step: int, meter, records):
    """The run's parts ``checkpoint`` reads: stand-ins for the learner, prompt pool and
    scheduler (only their state is read), the real meter and records, no export."""
    state = lambda: {"step": step}  # noqa: E731
    return SimpleNamespace(start=SimpleNamespace(run_dir=run), learner=SimpleNamespace(state_dict=state, version=step),
                           pool=SimpleNamespace(state_dict=state), scheduler=SimpleNamespace(state_dict=state),
                           compute=meter, records=records, export=lambda state: None)


def _drive(run: Path, records: OrderedRecords, evaluation, meter, steps: range, lag: int, sink) -> None:
    """The run loop's bookkeeping: a record per step, an evaluation every 6 steps that comes
    back ``lag`` steps later, released records logged, a checkpoint every 3 steps."""
    for step in steps:
        records.add({"step": step, **meter.snapshot()}, evaluate=step % 6 == 0, version=step)
        for done in [s for s in evaluation.submitted if s <= step - lag]:
            evaluation.deliver(done)
        for record in records.ready():
            sink.write(record)
        if step % 3 == 0:
            checkpoint(_parts(run, step, meter, records), "test", step)


def test_checkpoints_keep_pace_while_evaluations_lag_and_resume_logs_each_step_once(tmp_path):
    """Evaluations lag 8 steps, checkpoints are due every 3: every checkpoint is written at its
    step (it used to wait for the log and stay at step 3 while the log reached 36), and a
    crash after step 35 resumes from step 33 with every step logged once, evaluations redone."""
    meter, evaluation = ComputeMeter(2, n_params=1), _LaggingEvaluation()
    records, sink = OrderedRecords(evaluation, meter), JsonlSink(tmp_path / "metrics.jsonl")
    for upto in range(3, 36, 3):
        _drive(tmp_path, records, evaluation, meter, range(upto - 2 if upto > 3 else 0, upto + 1), 8, sink)
        assert load_checkpoint(tmp_path)[1]["step"] == upto  # never starved by the lag
    _drive(tmp_path, records, evaluation, meter, range(34, 36), 8, sink)  # then a kill -9
    sink.close()
    state, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 33 and meta["logged_through"] == 29  # step 30's evaluation is out
    assert _last_step(tmp_path) == 29

    truncate_after(tmp_path / "metrics.jsonl", meta["logged_through"])
    meter, evaluation = ComputeMeter(2, n_params=1), _LaggingEvaluation()
    meter.load_state_dict(state["compute"])
    records, sink = OrderedRecords(evaluation, meter), JsonlSink(tmp_path / "metrics.jsonl")
    records.load_state_dict(state["records"])
    assert list(evaluation.submitted) == [30] and torch.equal(evaluation.submitted[30], torch.full((2,), 30.0))
    _drive(tmp_path, records, evaluation, meter, range(34, 49), 8, sink)
    for step in list(evaluation.submitted):
        evaluation.deliver(step)
    for record in records.ready():
        sink.write(record)
    sink.close()
    logged = read_records(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in logged] == list(range(49))
    assert [r["step"] for r in logged if "val_pass_rate" in r] == list(range(0, 49, 6))
    assert all(r["val_pass_rate"] == r["step"] / 100 for r in logged if "val_pass_rate" in r)
