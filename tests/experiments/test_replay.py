"""``scalerl sweep --replay``: the adaptive policy on finished runs, from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scalerl.fit import law
from scalerl.fit.choose import THRESHOLD


def _write_run(path, A: float, seed: int, end: float = 1.0, n: int = 40) -> None:
    """A ``scalerl train`` run folder whose validation follows Eq. 1 with noise."""
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    with (path / "metrics.jsonl").open("w") as f:
        for i, c in enumerate(np.linspace(end / n, end, n)):
            val = float(np.clip(law.sigmoid(c, A, 1.5, 0.2, 0.0) + rng.normal(0, 0.01), 0, 1))
            f.write(json.dumps({"step": i, "compute_gpu_hours": float(c), "val_pass_rate": val}) + "\n")


@pytest.fixture
def study(tmp_path):
    """A sweep folder of three points: one clearly best, two behind."""
    root = tmp_path / "sweep"
    for name, A, seed in (("lr=1e-4/seed0", 0.8, 0), ("lr=1e-5/seed0", 0.3, 1), ("lr=3e-5/seed0", 0.5, 2)):
        _write_run(root / name, A, seed)
    return root


def test_replay_names_the_winner_and_writes_every_decision(study, tmp_path, cli_here):
    out = tmp_path / "decisions.json"
    done = cli_here("sweep", "--replay", str(study), "--budget", "1.0", "--json", str(out))
    assert done.returncode == 0, done.stderr
    d = json.loads(out.read_text())
    assert d["winner"] == "lr=1e-4/seed0" and d["full"]["winner"] == "lr=1e-4/seed0"
    assert {s["point"] for s in d["stopped"]} == {"lr=1e-5/seed0", "lr=3e-5/seed0"}
    for s in d["stopped"]:
        assert set(s) == {"point", "at_compute", "forecast", "p_best", "reason", "leader", "leader_forecast"}
        assert s["leader"] == "lr=1e-4/seed0"
        assert s["forecast"]["lo"] <= s["forecast"]["median"] <= s["forecast"]["hi"] and s["p_best"] < THRESHOLD
    assert d["compute_used"] < 0.6 * d["compute_full"] and d["compute_full"] == pytest.approx(3.0)
    assert "winner: lr=1e-4/seed0" in done.stdout and f"wrote {out}" in done.stdout
    # one line a point at every rung it ran to, as decisions.json keeps them
    assert d["done"] is True and d["under_way"] is None
    for line in (line for r in d["rounds"] for line in r["lines"]):
        assert line in done.stdout and line.startswith("rung ")
    assert any(" stopped: P(best) " in line and "against the leader's" in line for line in done.stdout.splitlines())


def test_replay_with_the_shared_shape_pairing_says_so_and_keeps_the_winner(study, tmp_path, cli_here):
    out = tmp_path / "decisions.json"
    done = cli_here("sweep", "--replay", str(study), "--budget", "1.0", "--pairing", "shared-shape", "--json", str(out))
    assert done.returncode == 0, done.stderr
    d = json.loads(out.read_text())
    assert d["pairing"] == "shared-shape" and "draws paired: shared-shape" in done.stdout
    decided = [r for r in d["rounds"] if r["forecasts"]]
    assert decided and all(r["paired"] in ("independent", "shared-shape") for r in decided)
    assert d["winner"] == "lr=1e-4/seed0" and "lr=1e-4/seed0" not in {s["point"] for s in d["stopped"]}


def test_every_pairing_is_a_choice_of_the_flag_and_the_spec(cli_here):
    from scalerl.experiments.adaptive import Adaptive
    from scalerl.fit.choose import PAIRING, PAIRINGS

    said = " ".join(cli_here("sweep", "--help").stdout.split())
    assert "--pairing {" + ",".join(PAIRINGS) + "}" in said
    assert PAIRING in PAIRINGS and Adaptive(budget=1.0).pairing == PAIRING
    for name in PAIRINGS:
        assert Adaptive(budget=1.0, pairing=name).pairing == name


def test_replay_takes_run_folders_and_log_files_by_name(tmp_path, cli_here):
    _write_run(tmp_path / "a", 0.8, 0)
    _write_run(tmp_path / "b", 0.79, 1)
    (tmp_path / "b.jsonl").write_text((tmp_path / "b" / "metrics.jsonl").read_text())
    done = cli_here("sweep", "--replay", str(tmp_path / "a"), str(tmp_path / "b.jsonl"), "--budget", "1")
    assert done.returncode == 0, done.stderr
    assert "a: " in done.stdout and "b: " in done.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--budget", "1"], "holds no runs"),  # an empty folder
        ([], "--replay needs --budget"),
        (["--budget", "1", "--first-rung", "2"], "the first rung (2) must be a positive compute no larger than the budget (1)"),
        (["--budget", "5"], "before the budget 5: a replay needs every run to reach the budget"),
        (["--budget", "1", "--threshold", "1.5"], "--threshold must lie in (0, 1)"),
        (["--budget", "1", "--pairing", "copula"], "--pairing: invalid choice: 'copula'"),
    ],
)
def test_bad_replays_are_one_sentence_with_exit_2(study, tmp_path, cli_here, args, says):
    empty = tmp_path / "empty"
    empty.mkdir()
    where = empty if says == "holds no runs" else study
    out = tmp_path / "d.json"
    out.write_text("kept")
    done = cli_here("sweep", "--replay", str(where), *args, "--json", str(out))
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert out.read_text() == "kept"  # nothing written is lost


def test_a_replay_never_writes_over_a_run_it_reads(tmp_path, cli_here):
    """``--json`` naming one of the runs is refused before anything is written, and the log is
    kept byte for byte; a folder is one sentence and leaves no stray file."""
    for name, A in (("lr1.jsonl", 0.8), ("lr2.jsonl", 0.4)):
        _write_run(tmp_path / name.removesuffix(".jsonl"), A, seed=1)
        (tmp_path / name).write_bytes((tmp_path / name.removesuffix(".jsonl") / "metrics.jsonl").read_bytes())
    before = (tmp_path / "lr1.jsonl").read_bytes()
    done = cli_here("sweep", "--replay", str(tmp_path / "lr1.jsonl"), str(tmp_path / "lr2.jsonl"), "--budget", "1",
                    "--json", str(tmp_path / "lr1.jsonl"))  # fmt: skip
    assert done.returncode == 2 and "--json" in done.stderr and "is the input" in done.stderr
    assert (tmp_path / "lr1.jsonl").read_bytes() == before and len(done.stderr.strip().splitlines()) == 1
    inside = cli_here("sweep", "--replay", str(tmp_path / "lr1"), str(tmp_path / "lr2"), "--budget", "1",
                      "--json", str(tmp_path / "lr1" / "metrics.jsonl"))  # fmt: skip
    assert inside.returncode == 2 and "is the input" in inside.stderr
    (tmp_path / "out").mkdir()
    folder = cli_here("sweep", "--replay", str(tmp_path / "lr1.jsonl"), str(tmp_path / "lr2.jsonl"), "--budget",
                      "1", "--json", str(tmp_path / "out"))  # fmt: skip
    assert folder.returncode == 2 and "it is a folder, which writing would replace with a file; name a file" in folder.stderr
    assert "Traceback" not in folder.stderr and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
