"""A dead generator is replaced and the run goes on; repeated deaths stop it with one sentence
and a checkpoint that loads (``scalerl.pipeline.restarts``). The deaths are SIGKILLs a reward
function sends its own generator on chosen calls (``dying_reward``): numbered, never timed.
The Ray case is in ``test_ray_backend.py`` (one Ray start for the file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dying_reward
import pytest
from pipeline_helpers import run_overrides

from scalerl.checkpoint import load_checkpoint
from scalerl.pipeline.restarts import (
    GeneratorDeaths,
    GeneratorsFailed,
    describe_exit,
    failure_sentence,
)


def test_the_window_rule_counts_deaths_within_the_last_steps():
    step = [0]
    deaths = GeneratorDeaths(limit=3, window=10, clock=lambda: step[0])
    deaths.died("generator 0", "killed by SIGKILL")
    step[0] = 5
    deaths.died("generator 1", "killed by SIGKILL")
    step[0] = 10  # the first death (step 0) has left the window: two within it
    deaths.died("generator 0", "exited with code 3")
    assert deaths.restarts == 3
    with pytest.raises(GeneratorsFailed, match=r"generators died 3 times within 10 steps .*the last, "
                                                r"generator 1, failed: ValueError: x$"):
        deaths.died("generator 1", "failed: ValueError: x")  # steps 5, 10, 10
    with pytest.raises(GeneratorsFailed, match="generators died once within 4 steps"):
        GeneratorDeaths(limit=1, window=4).died("generator 0", "killed by SIGKILL")


def test_the_sentence_says_whether_a_checkpoint_exists(tmp_path):
    assert describe_exit(-9) == "killed by SIGKILL" and describe_exit(3) == "exited with code 3"
    assert failure_sentence("learner rank 1 died (killed by SIGKILL).", tmp_path) == (
        "learner rank 1 died (killed by SIGKILL); no checkpoint was written before this, so the run starts over.")
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.pt").write_bytes(b"")
    (tmp_path / "checkpoint" / "meta.json").write_text(json.dumps({"step": 7}))
    assert failure_sentence("x", tmp_path) == (f"x; the newest checkpoint (step 7) is in {tmp_path}: continue with "
                                               f"`scalerl train --resume {tmp_path}`.")


def _train(run, overrides: list[str]) -> subprocess.CompletedProcess:
    sets = [a for o in overrides for a in ("--set", o)]
    return subprocess.run([sys.executable, "-m", "scalerl", "train", "--recipe", "scalerl", "--out", str(run), *sets,
                           "--no-fit"], capture_output=True, text=True, timeout=600, env=os.environ)


def _sync_run(model_dir, reward_fn: str, steps: int) -> list[str]:
    """Sync steps of two prompts x two completions on one generator: every step makes exactly
    four generator calls of the reward function, and its checkpoint is written before the
    next step's prompts go out."""
    return run_overrides(model_dir, **{
        "pipeline.backend": "local", "pipeline.mode": "sync", "pipeline.num_generators": 1,
        "pipeline.prompts_per_step": 2, "pipeline.generations": 2, "pipeline.prompts_per_chunk": 2,
        "filters.zero_variance": "false", "eval.on": "generator", "eval.every": 100, "eval.schedule": "every", "eval.num_prompts": 2,
        "eval.k": 1, "train.steps": steps, "train.checkpoint_every": 1, "task.reward_fn": reward_fn})


def test_a_killed_generator_is_replaced_and_the_run_finishes(warm_model_dir, tmp_path):
    """The fifth generator call (in step 2, or the first evaluation) kills its generator: a new
    one finishes the run, exit 0, every step logged once, the restart counted."""
    run = tmp_path / "run"
    done = _train(run, _sync_run(warm_model_dir, dying_reward.write(tmp_path, first=5, stop=6), steps=4))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    assert max(r.get("generator_restarts", 0) for r in records) >= 1
    assert "generator 0 killed by SIGKILL; replaced" in done.stdout
    assert dying_reward.calls(tmp_path) >= 4 * 4 + 2  # every step's and the evaluation's calls were made


def test_repeated_deaths_stop_with_one_sentence_and_a_checkpoint_that_loads(warm_model_dir, tmp_path):
    """From the eleventh generator call on, every call kills its generator. Steps 1 and 2 make
    at most ten (eight, and two of the first evaluation), so step 2's checkpoint is written;
    step 3's prompts then kill the generator and its replacements: the third death stops the
    run with one sentence naming the cause and that checkpoint, which loads."""
    run = tmp_path / "run"
    done = _train(run, _sync_run(warm_model_dir, dying_reward.write(tmp_path, first=11), steps=6))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"scalerl train: generators died 3 times within 20 steps (pipeline.generator_deaths=3, "
                    f"pipeline.generator_death_window=20); the last, generator 0, killed by SIGKILL; the newest "
                    f"checkpoint (step 2) is in {run}: continue with `scalerl train --resume {run}`."), done.stderr
    state, meta = load_checkpoint(run, lambda _: None)
    assert meta["step"] == 2 and state["learner"]["version"] == 2
