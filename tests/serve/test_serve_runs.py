"""scalerl.serve.runs: what the page shows, read from run folders as runs write them."""

from __future__ import annotations

import json
import os
import time

from serve_runs import write_run

from scalerl.serve import runs as data


def _one(tmp_path, **kw):
    run = write_run(tmp_path / "r", **kw)
    (found,) = [f for f in data.discover([tmp_path]) if f.kind == "run"]
    return run, found


def test_a_finished_run_is_summarised_with_its_forecast_fields(tmp_path):
    run, found = _one(tmp_path, extra_last={"forecast_step": 60, "forecast_final": 0.66, "forecast_final_lo": 0.6,
                                            "forecast_final_hi": 0.7, "forecast_budget": 0.061,
                                            "forecast_p_reach": 0.8, "forecast_time_to_target_h": 0.02,
                                            "forecast_time_to_target_h_lo": 0.01, "forecast_time_to_target_h_hi": None})  # fmt: skip
    s = data.summary(found)
    assert s["state"] == "finished" and s["step"] == 60 and s["steps"] == 60 and s["recipe"] == "scalerl"
    assert s["val_step"] == 60 and abs(s["reward"] - 0.44) < 1e-9
    assert s["forecast"] == {"median": 0.66, "lo": 0.6, "hi": 0.7, "budget": 0.061}
    assert s["hours_to_target"] == {"median": 0.02, "lo": 0.01, "hi": None} and s["p_reach"] == 0.8


def test_states_as_the_files_say(tmp_path):
    now = time.time()
    live, found = _one(tmp_path, upto=20)
    assert data.summary(found, now=now)["state"] == "running"  # its log was just written
    old = now - 3 * data.LIVE_S
    os.utime(live / "metrics.jsonl", (old, old))
    assert data.summary(found, now=now)["state"] == "paused"
    (live / "train.log").write_text("step 20\nscalerl train: the reward function failed on the first batch.\n")
    assert data.summary(found, now=now)["state"] == "failed"
    with (live / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 21, "stopped_early": "stopping early: not learning"}) + "\n")
    assert data.summary(found, now=now)["state"] == "stopped"


def test_a_runs_page_has_the_curve_the_band_ahead_and_the_crossing(tmp_path):
    _, found = _one(tmp_path, upto=30, target=0.6)
    d = data.detail(found)
    v = d["validation"]
    assert v["step"] == [0, 5, 10, 15, 20, 25, 30] and len(v["compute"]) == len(v["hours"]) == 7
    band = d["band"]
    assert band["compute"][0] == v["compute"][-1] and band["compute"][-1] >= 2 * v["compute"][-1]
    assert all(lo <= m <= hi for lo, m, hi in zip(band["lo"], band["median"], band["hi"]))
    assert set(band["crossing"]) == {"median", "lo", "hi"}
    assert {"reward_mean", "entropy", "reward_correctness"} <= set(d["training"])
    assert d["plan"]["plan"]["backend"] == "local" and "name: scalerl" in d["config"]
    assert d["resume"] == f"scalerl train --resume {found.path}"


def test_a_curve_too_short_to_fit_has_no_band_yet_and_a_flat_one_a_flat_band(tmp_path):
    _, found = _one(tmp_path, upto=10)
    assert data.detail(found)["band"] == {}
    flat = data.forecast_band([0.01 * i for i in range(1, 9)], [0.25] * 8, None, 0.6)
    assert flat["source"] == "flat" and set(flat["median"]) == {0.25}
    assert all(lo <= m <= hi for lo, m, hi in zip(flat["lo"], flat["median"], flat["hi"]))
    assert flat["rise"].startswith("forecast flat: ") and "flat" in flat["rise"]


def test_samples_are_newest_first_and_searchable(tmp_path):
    _, found = _one(tmp_path)
    assert [s["prompt"] for s in data.samples(found)] == ["add 40+2 =", "add 1+2 ="]
    assert [s["completion"] for s in data.samples(found, "41")] == ["<think></think> 41"]


def test_a_sweep_folder_is_a_study_with_its_fits_and_decisions(tmp_path):
    root = tmp_path / "sweep"
    for lr in ("1e-4", "1e-5"):
        write_run(root / f"scalerl/lr={lr}/seed0", upto=60)
    (root / "sweep.yaml").write_text("name: lr\n")
    (root / "decisions.json").write_text(json.dumps({"winner": "scalerl/lr=1e-4/seed0", "stopped": []}))
    (root / "_base" / "x").mkdir(parents=True)
    found = data.discover([root])
    assert [f.id for f in found if f.kind == "run"] == ["0/scalerl/lr=1e-4/seed0", "0/scalerl/lr=1e-5/seed0"]
    (study,) = [f for f in found if f.kind == "study"]
    s = data.study(study, [f for f in found if f.kind == "run"])
    assert set(s["curves"]) == {"scalerl/lr=1e-4/seed0", "scalerl/lr=1e-5/seed0"} and len(s["fits"]) == 2
    assert any(r["A"]["lo"] is not None for r in s["fits"])
    assert all(r["A"]["lo"] <= r["A"]["value"] <= r["A"]["hi"] for r in s["fits"] if r["A"]["lo"] is not None)
    assert s["decisions"]["winner"] == "scalerl/lr=1e-4/seed0"


def test_a_torn_last_line_is_skipped_as_a_writer_leaves_it(tmp_path):
    run, found = _one(tmp_path, upto=20)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 21, "val_pass_r')
    assert data.summary(found)["step"] == 20


def test_a_resumed_run_reads_as_one_curve_and_the_cache_follows_the_log(tmp_path):
    run, found = _one(tmp_path, upto=30, steps=60)
    first = data.detail(found)
    with (run / "metrics.jsonl").open("a") as f:  # a resume appends the steps after its checkpoint
        for step in range(31, 41):
            f.write(json.dumps({"step": step, "compute_gpu_hours": 0.001 * (step + 1), "wall_s": 1.8 * step,
                                **({"val_pass_rate": 0.55} if step % 5 == 0 else {})}) + "\n")  # fmt: skip
    again = data.detail(found, wait=True)
    assert again["step"] == 40 and again["validation"]["step"][-2:] == [35, 40]
    assert len(again["validation"]["value"]) == len(first["validation"]["value"]) + 2
    assert again["band"]["compute"][0] > first["band"]["compute"][0]  # refitted on the new evaluations
