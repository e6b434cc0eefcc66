"""What ``scalerl train`` tells a batch job (stdout a file, not a terminal): where its
validation prompts come from, and whole progress lines as it trains; and every metric key
the run writes has its line in ``docs/run-folder.md``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from glossary import undocumented

from scalerl.runfolder import read_records

SETS = {"pipeline.backend": "inprocess", "train.steps": 4, "train.checkpoint_every": 100, "eval.every": 1, "eval.schedule": "every",
        "eval.k": 2, "pipeline.prompts_per_step": 4, "pipeline.generations": 4, "length.control": "none",
        "sampling.max_new_tokens": 4, "log.progress": "true",
        "log.progress_every_s": 0, "log.tensorboard": "false", "train.max_minutes": "null"}


def test_a_run_into_a_log_file_says_its_validation_split_and_prints_whole_progress_lines(nano_dir, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i % 3}="}) + "\n" for i in range(8)))
    reward = tmp_path / "reward.py"
    reward.write_text("def score(completion, **fields):\n    return float(len(completion) % 2)\n")
    sets = SETS | {"model.base": nano_dir, "task.name": "dataset", "task.knobs": f"{{path: {data}}}",
                   "task.reward_fn": f"{reward}:score"}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    log = tmp_path / "train.log"
    with open(log, "w") as out:  # a file, as under SLURM or nohup
        proc = subprocess.run([sys.executable, "-m", "scalerl", "train", "--no-fit", "--out", str(tmp_path / "run"),
                               *args], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    text = log.read_text()
    assert proc.returncode == 0, (text, proc.stderr)
    # num_validation's default 100 meets the cap of half the file
    assert (f"validation: 4 of the 8 records of {data} are held out, a random slice drawn with task.knobs.seed=0 "
            "(task.knobs.num_validation=100, at most half the file), and 4 train;") in text
    progress = [line for line in text.splitlines() if line.startswith("scalerl: step ")]
    # every step's record is logged and shown (interval 0), the last one whole
    assert [line.split("  ")[0] for line in progress] == [f"scalerl: step {s}/4" for s in range(5)]
    last = progress[-1]
    for field in ("reward ", "val ", "(step 4)", "steps/min", "tok/s", "elapsed ", "ETA "):
        assert field in last, last
    assert "\x1b" not in text and "━" not in text  # no live bar drawn into the file
    records = read_records(tmp_path / "run" / "metrics.jsonl")
    keys = {k for r in records for k in r}
    assert {"step_trained_tokens", "total_trained_tokens", "total_gen_tokens", "gen_tokens_per_s"} <= keys
    assert any(k.startswith("forecast_") for k in keys)
    assert undocumented(keys) == []
