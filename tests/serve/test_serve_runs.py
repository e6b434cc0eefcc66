"""scalerl.serve.runs: what the page shows, read from run folders as runs write them, every
forecast number read from the run's one ``Forecast`` (the one ``scalerl plan`` prints)."""

from __future__ import annotations

import json
import os
import time

import pytest
from serve_runs import write_run

from scalerl import runfolder as rf
from scalerl.cli import main
from scalerl.serve.study import study

WAIT = 120.0  # a bound on a busy machine, never a time asserted


def _one(tmp_path, served, **kw):
    run = write_run(tmp_path / "r", **kw)
    server = served()
    (found,) = [f for f in server.discover() if f.kind == "run"]
    return run, found, server


def test_a_finished_run_is_summarised_with_its_one_forecast(tmp_path, served, capsys):
    """The list's row and ``scalerl plan --json`` on the same run give the same numbers."""
    run, found, server = _one(tmp_path, served, target=0.6)
    s = server.summary(found, wait=WAIT)
    assert s["state"] == "finished" and s["step"] == 60 and s["steps"] == 60 and s["recipe"] == "scalerl"
    assert s["val_step"] == 60 and abs(s["reward"] - 0.44) < 1e-9 and found.id == "r"
    assert main(["plan", str(run), "--target", "0.6", "--json", str(tmp_path / "plan.json")]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert s["forecast"]["method"] == plan["forecast"]["method"] and s["forecast"]["state"] == plan["forecast"]["state"]["name"]
    assert s["compute_to_target"] == plan["compute"] and s["hours_to_target"] == plan["hours"]
    assert s["p_reach"] == pytest.approx(plan["p_reach"], abs=1e-12)
    at = plan["at_budget"]
    assert [s["forecast"][k] for k in ("median", "lo", "hi")] == pytest.approx([at["value"], at["pred_lo"],
                                                                                at["pred_hi"]], abs=1e-12)


def test_states_as_the_files_say(tmp_path, served):
    now = time.time()
    live, found, server = _one(tmp_path, served, upto=20)
    assert server.summary(found)["state"] == "running"  # its log was just written
    old = now - 3 * rf.LIVE_S
    os.utime(live / "metrics.jsonl", (old, old))
    assert server.summary(found)["state"] == "paused"
    (live / "train.log").write_text("step 20\nscalerl train: the reward function failed on the first batch.\n")
    os.utime(live / "train.log", (old, old))
    assert server.summary(found)["state"] == "failed"
    rf.write_status(live, "stopped", "stopped by SIGTERM at step 20", signal="SIGTERM")
    s = server.summary(found)
    assert s["state"] == "stopped" and s["state_detail"] == "stopped by SIGTERM at step 20"
    rf.write_status(live, "paused", "between rungs: trained to compute 0.021 of the study's 0.06")
    assert server.summary(found)["state"] == "paused"


def test_a_runs_page_has_the_curve_the_band_ahead_and_the_crossing_from_one_forecast(tmp_path, served):
    _, found, server = _one(tmp_path, served, upto=30, target=0.6)
    d = server.detail(found, wait=WAIT)
    v = d["validation"]
    assert v["step"] == [0, 5, 10, 15, 20, 25, 30] and len(v["compute"]) == len(v["hours"]) == 7
    band = d["band"]
    assert band["compute"][0] == v["compute"][-1] and band["compute"][-1] >= 2 * v["compute"][-1]
    assert all(lo <= m <= hi for lo, m, hi in zip(band["lo"], band["median"], band["hi"]))
    assert len(band["hours"]) == len(band["compute"])  # the band follows the hours axis too
    # the header's numbers and the chart's text come from one forecast: they cannot disagree
    assert band["crossing"] == d["compute_to_target"] and band["source"] == d["forecast"]["method"]
    lo_end, hi_end = d["forecast"]["band_lo"], d["forecast"]["band_hi"]
    if lo_end is not None and lo_end <= 0.6 <= hi_end:  # the target inside the band at the budget
        assert d["p_reach"] > 0.0
    assert {"reward_mean", "entropy", "reward_correctness"} <= set(d["training"])
    assert d["plan"]["plan"]["backend"] == "local" and "name: scalerl" in d["config"]
    assert d["resume"] == f"scalerl train --resume {found.path}"


def test_a_short_run_says_how_many_evaluations_it_needs_and_a_flat_one_is_not_learning(tmp_path, served):
    _, found, server = _one(tmp_path, served, upto=10)
    d = server.detail(found, wait=WAIT)
    assert d["forecast"]["state"] == "too_few_evaluations" and "3 more" in d["band"]["error"]
    flat = write_run(tmp_path / "flat", upto=40, flat=0.25)
    (found,) = [f for f in served(flat).discover()]
    d = served(flat).detail(found, wait=WAIT)
    assert d["forecast"]["state"] == "not_learning" and d["band"]["state"] == "not_learning"
    assert all(lo <= m <= hi for lo, m, hi in zip(d["band"]["lo"], d["band"]["median"], d["band"]["hi"]))


def test_samples_are_newest_first_and_searchable(tmp_path, served):
    _, found, server = _one(tmp_path, served)
    assert [s["prompt"] for s in server.samples(found)] == ["add 40+2 =", "add 1+2 ="]
    assert [s["completion"] for s in server.samples(found, "41")] == ["<think></think> 41"]


def test_a_sweep_folder_is_a_study_with_its_fits_and_decisions(tmp_path, served):
    root = tmp_path / "sweep"
    for lr in ("1e-4", "1e-5"):
        write_run(root / f"scalerl/lr={lr}/seed0", upto=60)
    (root / "sweep.yaml").write_text("name: lr\n")
    (root / "decisions.json").write_text(json.dumps({"winner": "scalerl/lr=1e-4/seed0", "stopped": []}))
    (root / "_base" / "x").mkdir(parents=True)
    server = served(root)
    found = server.discover()
    assert [f.id for f in found if f.kind == "run"] == ["scalerl/lr=1e-4/seed0", "scalerl/lr=1e-5/seed0"]
    (s_found,) = [f for f in found if f.kind == "study"]
    assert s_found.id == "sweep"  # the served folder, by its name: a sweep's spec makes it a study
    s = study(server, s_found, [f for f in found if f.kind == "run"])
    assert set(s["curves"]) == {"scalerl/lr=1e-4/seed0", "scalerl/lr=1e-5/seed0"} and len(s["fits"]) == 2
    assert all(r["A"]["lo"] <= r["A"]["value"] <= r["A"]["hi"] for r in s["fits"] if r["A"]["lo"] is not None)
    assert s["decisions"]["winner"] == "scalerl/lr=1e-4/seed0"


def test_a_folder_of_runs_is_not_a_study_and_its_ids_have_no_prefix(tmp_path, served):
    for name in ("a", "b"):
        write_run(tmp_path / "runs" / name, upto=20)
    found = served(tmp_path / "runs").discover()
    assert [(f.id, f.kind) for f in found] == [("a", "run"), ("b", "run")]


def test_a_torn_last_line_is_skipped_as_a_writer_leaves_it(tmp_path, served):
    run, found, server = _one(tmp_path, served, upto=20)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 21, "val_pass_r')
    assert server.summary(found)["step"] == 20


def test_a_resumed_run_reads_as_one_curve_and_the_forecast_follows_the_log(tmp_path, served):
    run, found, server = _one(tmp_path, served, upto=30, steps=60)
    first = server.detail(found, wait=WAIT)
    with (run / "metrics.jsonl").open("a") as f:  # a resume appends the steps after its checkpoint
        for step in range(31, 41):
            f.write(json.dumps({"step": step, "compute_gpu_hours": 0.001 * (step + 1), "wall_s": 1.8 * step,
                                **({"val_pass_rate": 0.55} if step % 5 == 0 else {})}) + "\n")  # fmt: skip
    again = server.detail(found, wait=WAIT)
    assert again["step"] == 40 and again["validation"]["step"][-2:] == [35, 40]
    assert len(again["validation"]["value"]) == len(first["validation"]["value"]) + 2
    assert again["band"]["compute"][0] > first["band"]["compute"][0]  # made again on the new evaluations


def test_every_axis_has_its_unit_and_the_band_follows_step_compute_and_hours(tmp_path, served):
    """A CPU run's compute is core-hours (plan.json: not accelerated); the band and the
    crossing come in steps and hours too; each evaluation carries the forecast at its x."""
    run, found, server = _one(tmp_path, served, upto=30, target=0.6)
    (run / "plan.json").write_text(json.dumps({"plan": {"device": "cpu", "accelerated": False}}))
    d = server.detail(found, wait=WAIT)
    assert d["units"] == {"compute": "core-hours", "hours": "hours since the run started", "step": "step"}
    band, v = d["band"], d["validation"]
    # write_run: compute = 0.001 (step + 1), so step = 1000 compute - 1, on the data and past it
    assert band["step"] == pytest.approx([1000 * c - 1 for c in band["compute"]], abs=1e-6)
    assert band["hours"] is not None and band["hours"][0] == pytest.approx(v["hours"][-1], rel=0.05)
    assert d["band"]["crossing_step"]["median"] == pytest.approx(1000 * d["compute_to_target"]["median"] - 1, abs=1e-6)
    assert len(v["forecast"]) == len(v["compute"]) and all(0.0 <= y <= 1.0 for y in v["forecast"])
    assert rf.compute_unit({"plan": {"device": "cuda:0", "accelerated": True}}) == "GPU-hours"
    assert rf.compute_unit(None) == "device-hours"


def test_every_column_has_a_value_or_says_why(tmp_path, served):
    """Without a target the row still forecasts at the run's own budget, and the hours say
    what to set."""
    _, found, server = _one(tmp_path, served, upto=30, target=None)
    s = server.summary(found, wait=WAIT)
    # its own budget: compute per step so far x train.steps (0.031 / 30 x 60; the last step is at 0.061)
    assert s["forecast"]["median"] is not None and s["forecast"]["budget"] == pytest.approx(0.031 / 30 * 60)
    assert s["hours_note"] == "set forecast.target" and s["p_reach"] is None


def test_the_overview_groups_seeds_and_lists_the_values_that_differ(tmp_path, served):
    from scalerl.serve.overview import overview

    for lr in ("1e-4", "1e-5"):
        for seed in (0, 1):
            run = write_run(tmp_path / f"lr={lr}" / f"seed{seed}", upto=40)
            cfg = {"name": "scalerl", "train": {"steps": 60, "seed": seed}, "optim": {"lr": float(lr)},
                   "forecast": {"target": 0.6}}  # fmt: skip
            (run / "config.yaml").write_text(json.dumps(cfg))
    server = served()
    runs = [f for f in server.discover() if f.kind == "run"]
    for f in runs:
        server.summary(f, wait=WAIT)  # each run read and forecast
    d = overview(server, runs)
    assert d["columns"] == ["optim.lr", "train.seed"]
    assert {r["group"] for r in d["runs"]} == {"scalerl (optim.lr=0.0001)", "scalerl (optim.lr=1e-05)"}
    groups = {g["name"]: g for g in d["groups"]}
    assert set(groups) == {"scalerl (optim.lr=0.0001)", "scalerl (optim.lr=1e-05)"}
    for g in groups.values():  # the mean lies in the min-max band of its two seeds
        assert len(g["runs"]) == 2 and all(lo <= m <= hi for lo, m, hi in zip(g["lo"], g["mean"], g["hi"]))
    assert all(r["band"] is not None and len(r["compute"]) == 9 for r in d["runs"])


def test_a_study_in_progress_says_its_rung_and_no_winner(tmp_path, served):
    root = tmp_path / "sweep"
    for lr in ("1e-4", "1e-5"):
        write_run(root / f"scalerl/lr={lr}/seed0", upto=20)
    (root / "sweep.yaml").write_text("name: lr\n")
    (root / "decisions.json").write_text(json.dumps({
        "done": False, "winner": ["scalerl/lr=1e-4/seed0", "scalerl/lr=1e-5/seed0"], "stopped": [], "rounds": [],
        "under_way": {"rung": 2, "of": 4, "at_compute": 0.015, "running": ["a", "b", "c"]}}))
    server = served(root)
    found = server.discover()
    (s_found,) = [f for f in found if f.kind == "study"]
    d = study(server, s_found, [f for f in found if f.kind == "run"])["decisions"]
    assert d["winner"] is None and d["progress"] == "rung 2 of 4 under way (to compute 0.015); 3 point(s) running"


def test_against_a_baseline_every_run_shows_its_gaps_with_intervals(tmp_path, served):
    root = tmp_path / "sweep"
    for lr in ("1e-4", "1e-5"):
        write_run(root / f"scalerl/lr={lr}/seed0", upto=60)
    (root / "sweep.yaml").write_text("name: lr\n")
    server = served(root)
    found = server.discover()
    (s_found,) = [f for f in found if f.kind == "study"]
    runs = [f for f in found if f.kind == "run"]
    deadline = time.monotonic() + WAIT
    while True:  # the laws and forecasts are made in the background
        s = study(server, s_found, runs, baseline="scalerl/lr=1e-4/seed0")
        if (len(s["fits"]) == 2 and s["versus"].get("rows") and s["versus"]["rows"][0]["forecast"]) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    (row,) = s["versus"]["rows"]
    assert row["run"] == "scalerl/lr=1e-5/seed0"
    fits = {f["run"]: f for f in s["fits"]}
    a, b = fits["scalerl/lr=1e-5/seed0"]["A"], fits["scalerl/lr=1e-4/seed0"]["A"]
    assert row["A"]["value"] == pytest.approx(a["value"] - b["value"], abs=1e-12)
    if row["A"]["lo"] is not None:
        assert row["A"]["lo"] <= row["A"]["value"] <= row["A"]["hi"]
    g = row["forecast"]
    assert g["lo"] <= g["median"] <= g["hi"] and 0.0 <= g["p_above"] <= 1.0


def test_a_forecast_is_of_the_version_of_the_files_its_view_read(tmp_path, served):
    """Keyed by the view's own stamp: a view answered from an older read is forecast as what it
    is, and the newer files get their own forecast (never the older one under the newer key)."""
    run, found, server = _one(tmp_path, served, upto=40)
    old = server.view(found, wait=WAIT, first_wait=WAIT)
    first = server.forecast(found, old, wait=WAIT).forecast
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 41, "compute_gpu_hours": 0.042, "wall_s": 73.8, "val_pass_rate": 0.61}) + "\n")
    new = server.view(found, wait=WAIT, first_wait=WAIT)
    assert new.stamp != old.stamp and len(new.log.curve) == len(old.log.curve) + 1
    second = server.forecast(found, new, wait=WAIT).forecast
    assert len(first.forecast.log.curve) == len(old.log.curve) and len(second.forecast.log.curve) == len(new.log.curve)


def test_a_run_whose_config_is_not_read_takes_no_part_in_the_differing_values():
    from scalerl.serve.overview import differing, group_of

    configs = {"a": {"optim": {"lr": 1e-4}, "train": {"seed": 0}}, "b": {"optim": {"lr": 1e-4}, "train": {"seed": 1}},
               "c": {"optim": {"lr": 3e-4}, "train": {"seed": 0}}, "unread": {}}  # fmt: skip
    assert differing(configs) == ["optim.lr", "train.seed"]
    many = {i: {"k": {f"x{j}": i * j for j in range(12)}, "train": {"seed": i}} for i in range(3)}
    assert len(differing(many)) == 8 and len(differing(many, most=None)) == 12  # columns capped, groups not
    assert group_of("scalerl", {"optim.lr": "0.0001", "train.seed": "0"}) == "scalerl (optim.lr=0.0001)"


def test_the_values_a_user_varied_come_first_and_the_rest_are_counted():
    """The newcomer's list: capped at 8 in alphabetical order, optim.lr and train.steps were
    dropped for eval.* and model.* with no hint that more existed."""
    from scalerl.serve.overview import MAX_COLUMNS, differing

    base = {"eval": {"every": 50}, "model": {"arch": "llama", "base": None, "preset": "nano",
                                             "sft": {"force": False, "max_seconds": 120, "target_band": [0.2, 0.4]}},
            "forecast": {"target": None}, "optim": {"lr": 5e-5}, "train": {"steps": 900, "max_minutes": 6.5}}  # fmt: skip
    t1 = {**base, "forecast": {"target": 0.8}, "train": {"steps": 400, "max_minutes": 3},
          "eval": {"every": 25}, "model": {**base["model"], "arch": "qwen2", "base": "/x", "preset": "tiny",
                                           "sft": {"force": True, "max_seconds": 60, "target_band": [0.1, 0.4]}}}
    flat_run = {**base, "optim": {"lr": 1e-9}, "train": {"steps": 450, "max_minutes": 3}}
    configs = {"t1": t1, "flat": flat_run, "third": {**base, "optim": {"lr": 2e-4}}}
    every = differing(configs, most=None)
    assert every[:3] == ["optim.lr", "train.steps", "train.max_minutes"]  # three values each, then two
    assert len(every) == 11 and len(differing(configs)) == MAX_COLUMNS  # the rest: "+3 more differ"


def test_a_seed_that_shares_no_compute_with_its_group_is_left_out_not_the_group():
    """Probe OV-seed-groups: seed 9 at compute 100-103 beside seeds 0-2 at 0-3 removed the group."""
    from scalerl.serve.overview import group_of, groups

    rows = [{"id": f"s{i}", "group": "g", "compute": [0.0, 1.0, 2.0, 3.0], "value": [0.1, 0.2, 0.3, 0.3 + 0.01 * i]}
            for i in range(3)] + [{"id": "late_s9", "group": "g", "compute": [100.0, 103.0], "value": [0.5, 0.6]}]
    (g,) = groups(rows)
    assert g["runs"] == ["s0", "s1", "s2"] and [m["id"] for m in g["left_out"]] == ["late_s9"]
    assert g["compute"][0] == 0.0 and g["compute"][-1] == 3.0
    huge = {f"k{j}": "None" for j in range(20_000)}  # a 20,000-key config made every group's name 249 KB
    name = group_of("scalerl", huge | {"optim.lr": "1e-4"}, shown=["optim.lr"])
    assert name.startswith("scalerl (optim.lr=1e-4, +20,000 more #") and len(name) < 100


def _finished(folder, seed: int = 0, n: int = 8) -> None:
    """``n`` finished runs of one population, as the trainer writes them (the law of ``write_run``
    with each run's own B and C_mid)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for i in range(n):
        b, mid = rng.uniform(1.2, 1.8), rng.uniform(0.015, 0.025)
        run = write_run(folder / f"done{i}")
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for r in lines:
            if "val_pass_rate" in r:
                c = r["compute_gpu_hours"]
                r["val_pass_rate"] = 0.1 + 0.6 / (1 + (mid / c) ** b) + rng.normal(0, 0.01)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def _with_prior(run, spec) -> None:
    import yaml

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["forecast"]["prior_runs"] = str(spec)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))


def test_a_run_with_forecast_prior_runs_gets_its_prior_on_the_page_as_in_plan(tmp_path, served):
    """The run's config names finished runs: the page's forecast is made under their prior,
    as ``plan`` on the folder makes it (and as the trainer's live record does)."""
    _finished(tmp_path / "study")
    run = write_run(tmp_path / "study" / "new", upto=30)  # beneath its own prior_runs, never part of it
    _with_prior(run, tmp_path / "study")
    server = served(run)
    (found,) = server.discover()
    s = server.summary(found, wait=WAIT, first_wait=WAIT)
    out = tmp_path / "plan.json"
    assert main(["plan", str(run), "--target", "0.6", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["forecast"]["method"] == "prior" == s["forecast"]["method"]
    assert plan["forecast"]["why"].startswith("prior from 8 finished runs")
    assert s["compute_to_target"] == plan["compute"] and s["p_reach"] == pytest.approx(plan["p_reach"], abs=1e-12)
    at = plan["at_budget"]
    assert [s["forecast"][k] for k in ("median", "lo", "hi")] == pytest.approx([at["value"], at["pred_lo"],
                                                                                at["pred_hi"]], abs=1e-12)
    # --prior-runs none: the same run without its prior, so the answer is another one
    assert main(["plan", str(run), "--target", "0.6", "--prior-runs", "none", "--json", str(out)]) == 0
    alone = json.loads(out.read_text())
    assert alone["forecast"]["method"] != "prior" and alone["at_budget"]["pred_hi"] != at["pred_hi"]


def test_a_forecast_prior_runs_pointing_nowhere_is_one_sentence_on_the_page_and_in_plan(tmp_path, served, capsys):
    run = write_run(tmp_path / "r", upto=20)
    _with_prior(run, tmp_path / "nowhere")
    server = served()
    (found,) = [f for f in server.discover() if f.kind == "run"]
    says = f"{run / 'config.yaml'}: forecast.prior_runs {tmp_path / 'nowhere'}: no such file or folder."
    s = server.summary(found, wait=WAIT, first_wait=WAIT)
    assert s["forecast"]["note"] == says.rstrip(".") and s["forecast"]["median"] is None  # a page's note has no stop
    assert main(["plan", str(run), "--target", "0.6"]) == 2
    assert capsys.readouterr().err.strip() == f"scalerl plan: error: {says}"


def test_a_finished_run_added_to_a_runs_prior_reaches_its_page_without_the_run_writing(tmp_path, served):
    """The page's forecast is kept while the run's files and its prior's are unchanged: a
    finished run added to ``forecast.prior_runs`` is learned from at the next read, as ``plan``
    reads it then, though the run itself (a finished one, say) writes nothing."""
    _finished(tmp_path / "study")
    run = write_run(tmp_path / "study" / "new", upto=30)
    _with_prior(run, tmp_path / "study")
    server = served(run)
    (found,) = server.discover()
    first = server.summary(found, wait=WAIT, first_wait=WAIT)
    assert server.forecast(found, server.view(found)).forecast.forecast.why.startswith("prior from 8 finished runs")
    again = server.summary(found, wait=WAIT, first_wait=WAIT)
    assert again["forecast"] == first["forecast"]  # nothing changed: the kept forecast
    _finished(tmp_path / "study" / "more", seed=1, n=1)  # one more finished run beside it
    server.summary(found, wait=WAIT, first_wait=WAIT)
    made = server.forecast(found, server.view(found), wait=WAIT)
    assert not made.stale and made.forecast.forecast.why.startswith("prior from 9 finished runs")
    out = tmp_path / "plan.json"
    assert main(["plan", str(run), "--target", "0.6", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["forecast"]["why"].startswith("prior from 9 finished runs")
