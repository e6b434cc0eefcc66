"""A TRL-style batch reward function and a per-sample one, weighted (``task.reward_fns``,
``task.reward_weights``), train a tiny model on the ``local`` backend (generators in their own
processes): every call of the batch function gets whole groups, and each function's reward is
logged by name (``reward/<NAME>``) in ``metrics.jsonl``."""

from __future__ import annotations

from pathlib import Path

from test_cli_errors import scalerl
from test_user_code_runs import TINY

from scalerl.runfolder import read_records

REWARDS = '''
import os

def digits(prompts, completions, completion_ids, answer, trainer_state, **kwargs):
    """TRL's form: the share of the answer's digits the completion holds, per completion."""
    with open(os.path.join(os.path.dirname(__file__), "sizes.txt"), "a") as f:
        f.write(f"{len(completions)} {len(completion_ids)} {len(answer)} {trainer_state.global_step}\\n")
    return [sum(d in c for d in a) / len(a) for c, a in zip(completions, answer)]

def tidy(completion, **fields):
    """Per sample: distinct characters / 10, at most 1 (varies, so the groups have something to learn)."""
    return min(len(set(completion)), 10) / 10
'''


def test_weighted_trl_and_per_sample_rewards_train_and_are_logged_by_name(nano_dir, tmp_path):
    reward = tmp_path / "rewards.py"
    reward.write_text(REWARDS)
    # every completion is cut at 4 tokens: kept, and scored as the functions say (a user's reward: auto
    # trains on it as returned and a cut completion keeps its reward)
    sets = TINY | {"pipeline.backend": "local", "eval.k": 4, "task.reward_fns": f"[{reward}:digits, {reward}:tidy]",
                   "task.reward_weights": "[1.0, 0.25]", "length.truncation": "keep"}
    args = [a for k, v in ({"model.base": nano_dir} | sets).items() for a in ("--set", f"{k}={v}")]
    run = tmp_path / "run"
    proc = scalerl("train", "--no-fit", *args, "--out", str(run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = read_records(run / "metrics.jsonl")
    trained = [r for r in records if "grad_norm" in r]
    assert [r["step"] for r in trained] == [1, 2, 3]
    for r in trained:
        assert 0.0 <= r["reward/digits"] <= 1.0 and 0.0 <= r["reward/digits_std"] <= 0.5
        assert 0.0 <= r["reward/tidy"] <= 1.0 and r["reward/tidy_std"] >= 0.0
        assert r["reward_errors"] == 0 and r["reward_none"] == 0
        # the learner trained on the weighted sum: r = 1·digits + 0.25·tidy, averaged
        assert abs(r["reward_mean"] - (r["reward/digits"] + 0.25 * r["reward/tidy"])) < 1e-6
        assert r["step_trained_tokens"] > 0
    calls = [tuple(map(int, line.split())) for line in Path(tmp_path / "sizes.txt").read_text().splitlines()]
    # training calls score whole groups (G = 4), evaluations k = 4 per prompt: always a multiple of 4
    assert calls and all(n > 0 and n % 4 == 0 and n == ids == answers for n, ids, answers, _ in calls)
    assert all(0 <= step <= 3 for *_, step in calls)
    assert any(r["grad_norm"] > 0 for r in trained)  # distinct completions: some group has a nonzero advantage
