"""Runs with user code that misbehaves (issue 28): a reward function that hangs or calls
``sys.exit`` on some samples trains every step; one that fails on every sample of the first
batch (or an environment that cannot be built) stops with one sentence and exit 2; SIGTERM
while an evaluation hangs in user code stops the run; a prompt longer than the model's
context is refused before training. Each run is a fresh interpreter (hung threads end with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from test_cli_errors import assert_one_sentence, scalerl
from test_resume import _wait_until

from scalerl.runfolder import read_records

TINY = {"pipeline.backend": "inprocess", "train.steps": 3, "train.checkpoint_every": 100,
        "eval.num_prompts": 2, "eval.k": 2, "eval.every": 100, "eval.schedule": "every", "pipeline.prompts_per_step": 4,
        "pipeline.generations": 4, "length.control": "none", "sampling.max_new_tokens": 4,
        "forecast.enabled": "false", "log.progress": "false", "log.tensorboard": "false",
        "train.max_minutes": "null"}


def _args(model: Path, **extra) -> list[str]:
    return [a for k, v in ({"model.base": model} | TINY | extra).items() for a in ("--set", f"{k}={v}")]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


SOMETIMES_BAD = '''
import itertools, sys, time
_calls = itertools.count()

def score(completion, **fields):
    n = next(_calls)
    if n % 50 == 7:
        time.sleep(10**6)  # hangs: abandoned at task.reward_timeout_s
    if n % 50 == 23:
        sys.exit(3)
    return float(len(completion) % 2)
'''


def test_a_reward_that_sometimes_hangs_or_exits_trains_every_step(nano_dir, tmp_path):
    """About 1 call in 50 hangs and 1 in 50 raises SystemExit; every 50 consecutive calls hold
    one of each, and the training calls (48) follow the step-0 evaluation's 4 in one process."""
    reward = _write(tmp_path / "reward.py", SOMETIMES_BAD)
    run = tmp_path / "run"
    proc = scalerl("train", "--no-fit", *_args(nano_dir, **{"task.reward_fn": f"{reward}:score",
                                                             "task.reward_timeout_s": 1}),
                   "--out", str(run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = read_records(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert 2 <= sum(r.get("reward_errors", 0) for r in records) <= 4, records  # the hang and the exit
    assert proc.stderr.count("failed on a sample") == 1  # once per run, not once per task (evaluator, generator)


def test_a_reward_that_fails_on_every_sample_of_the_first_batch_is_one_sentence_naming_it(nano_dir, tmp_path):
    """Of two reward functions, the sentence names the one that failed, not both."""
    reward = _write(tmp_path / "reward.py", "def score(completion, **fields):\n    raise ValueError('my bug')\n"
                                            "def fine(completion, **fields):\n    return 1.0\n")
    proc = scalerl("train", "--no-fit", *_args(nano_dir, **{"task.reward_fns": f"[{reward}:fine, {reward}:score]"}),
                   "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"scalerl train: task.reward_fns {reward}:score failed on every sample of the first "
                           "batch (16 of 16, counted in reward_errors"), proc.stderr
    assert proc.stderr.count("ValueError: my bug") == 1  # the first failure, shown once in the run (probe 3)


ENV = '''
class Env:
    def __init__(self, index):
        self.index = index

    def reset(self, example):
        return example["problem"]

    def step(self, action):
        return None, 1.0, True
'''


def test_an_environment_whose_constructor_fails_is_one_sentence(nano_dir, tmp_path):
    env = _write(tmp_path / "env.py", ENV)
    proc = scalerl("train", "--no-fit", *_args(nano_dir, **{"env.name": f"{env}:Env"}),
                   "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "failed on every sample of the first batch" in last and "env_errors" in last, proc.stderr
    assert "missing 1 required positional argument: 'index'" in proc.stderr


HANGS = '''
import pathlib, time

def score(completion, **fields):
    pathlib.Path(__file__).with_name("hung").touch()
    time.sleep(10**6)
'''


def test_sigterm_while_an_evaluation_hangs_on_a_generator_stops_the_run(nano_dir, tmp_path):
    """The step-0 evaluation runs on the generator and its reward hangs (a limit far away): the
    stop waits train.stop_wait_s for it, then ends with its checkpoint (exit 143)."""
    reward = _write(tmp_path / "reward.py", HANGS)
    args = _args(nano_dir, **{"task.reward_fn": f"{reward}:score", "task.reward_timeout_s": 10**6,
                              "pipeline.backend": "local", "eval.on": "generator", "train.stop_wait_s": 1})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scalerl.cli", "train", "--no-fit", *args, "--out",
                             str(tmp_path / "run")], env=env, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_until(lambda: (tmp_path / "hung").exists(), proc, "the hung evaluation")
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=300)  # a hang bound, not a speed one
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = proc.stderr.read()
    assert code == 143, err
    assert "Traceback" not in err and "scalerl train: stopped by SIGTERM" in err, err


def test_a_prompt_longer_than_the_context_is_refused_naming_its_record(nano_dir, tmp_path):
    import json

    from scalerl.models.load import load_tokenizer  # noqa: F401 - the nano model's context
    context = json.loads((nano_dir / "config.json").read_text())["max_position_embeddings"]
    lines = [{"prompt": "1+1"} for _ in range(20)]
    lines[7] = {"prompt": " ".join(["1+1"] * context)}
    data = _write(tmp_path / "data.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    reward = _write(tmp_path / "reward.py", "def score(completion, **fields):\n    return 1.0\n")
    sets = {"task.name": "dataset", "task.knobs": f"{{path: {data}, num_validation: 2}}",
            "task.reward_fn": f"{reward}:score"}
    proc = scalerl("train", "--no-fit", *_args(nano_dir, **sets), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert_one_sentence(proc, f"{data}:8", "does not fit the", "task.long_prompts=cut")
    assert not (tmp_path / "run").exists()


LEAVES_CHILDREN = """
import os, pathlib, subprocess
_started = []

def score(completion, **fields):
    if not _started:
        _started.append(1)
        here = pathlib.Path(__file__).parent
        child = subprocess.Popen(["sleep", "300"])  # R17: a long-lived child, never waited for
        pid = os.fork()  # R16: a fork whose child returns too
        with open(here / "pids.txt", "a") as f:
            f.write(f"{child.pid} {pid if pid else os.getpid()}\\n")
    return 1.0
"""


def test_children_a_reward_function_leaves_running_are_stopped_at_the_end(nano_dir, tmp_path):
    """Reliability probe 3, R16 and R17, on the local backend (the reward runs in a spawned generator)."""
    reward = _write(tmp_path / "reward.py", LEAVES_CHILDREN)
    proc = scalerl("train", "--no-fit", *_args(nano_dir, **{"task.reward_fn": f"{reward}:score",
                                                             "pipeline.backend": "local"}),
                   "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    pids = [int(p) for p in (tmp_path / "pids.txt").read_text().split()]
    assert pids
    left = [p for p in pids if Path(f"/proc/{p}").exists()]
    for p in left:  # never leave them to the machine, whatever the verdict
        os.kill(p, signal.SIGKILL)
    assert left == [], proc.stdout
