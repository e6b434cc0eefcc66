"""``scalerl plan`` through the real command: a finished and a live run folder, a peer's
log with a speeds file, in text, JSON, a plot and HTML; bad input is one sentence, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.fit.law import compute_for_reward, sigmoid

from .._files import write_csv

A, B, C_MID, R0 = 0.7, 1.5, 2.0, 0.3
DEVICES, STEP_S = 4, 90.0  # 4 devices, 90 s a step: 0.1 device-hours a step


def _records(steps: int = 120, every: int = 10) -> list[dict]:
    rng = np.random.default_rng(0)
    out, wall = [], 0.0
    for step in range(steps + 1):
        wall = wall + STEP_S if step else 1.0
        c = DEVICES * wall / 3600.0
        r = {"step": step, "compute_gpu_hours": c, "wall_s": wall, "gen_tokens": 1000 * step,
             "train_tokens": 800 * step}  # fmt: skip
        if step:  # 3 generators busy 87 of 90 s each: 261 generator-seconds a step
            r |= {"learner_busy_s": 40.0, "publish_s": 5.0, "generator_stall_s": 3.0, "generator_idle_s": 6.0,
                  "learner_world_size": 1, "staleness_hist": {"1": 8}}  # fmt: skip
        if step % every == 0:
            noise = 0.01 * rng.standard_normal() if step else 0.0
            r |= {"val_pass_rate": float(sigmoid(c, A, B, C_MID, R0) + noise), "learner_eval_s": 0.0}
        out.append(r)
    return out


def _run_folder(path: Path, records: list[dict], torn: str = "") -> Path:
    path.mkdir()
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + torn)
    (path / "config.yaml").write_text("pipeline:\n  mode: pipeline-rl\n  k: 4\n")
    return path


def test_a_finished_run_answers_in_text_json_plot_and_html(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", _records())
    out = tmp_path / "out"
    out.mkdir()
    code = main(["plan", str(run), "--target", "0.69", "--budget-hours", "5", "--devices", "6",
                 "--json", str(out / "plan.json"), "--plot", str(out / "plan.png"), "--html", str(out / "plan.html")])
    text = capsys.readouterr().out
    assert code == 0
    assert "target 0.69 (read as the mean of its last 5 evaluations; 95% intervals): compute" in text and "P(reaching 0.69 within 5 hours)" in text
    assert "recommended:" in text and "Splits of the devices" in text
    data = json.loads((out / "plan.json").read_text())
    for key in ("hours", "compute", "device_hours"):
        assert set(data[key]) == {"median", "lo", "hi"}
        assert data[key]["lo"] <= data[key]["median"]
    # the compute axis is device-hours at 4 devices: hours are compute / 4 past the run's 3 h
    assert data["hours"]["median"] == pytest.approx(data["compute"]["median"] / DEVICES, rel=0.02)
    assert data["compute"]["median"] > 12.0  # beyond the data (3 h x 4 devices)
    assert 0.0 <= data["p_reach"] <= 1.0 and data["budget"] == {"hours": 5.0, "compute": None}
    thr = data["throughput"]
    assert thr["measured"]["generators"] == 3 and thr["measured"]["k"] == 4
    assert thr["current"]["step_s"] == pytest.approx(87.0)  # 261 generator-s / 3, above 40 + 5
    assert len(thr["splits"]) == 5  # 6 devices
    assert thr["recommended"]["generators"] == 5  # 261 / 5 = 52.2 s, above 40 + 5
    assert (out / "plan.png").read_bytes()[:4] == b"\x89PNG"
    assert "<img" in (out / "plan.html").read_text()


def test_a_live_run_folder_with_a_torn_last_line_answers(tmp_path, capsys):
    run = _run_folder(tmp_path / "live", _records(steps=60), torn='{"step": 61, "wall_')
    assert main(["plan", str(run), "--target", "0.6", "--budget-compute", "3"]) == 0
    text = capsys.readouterr().out
    assert "target 0.6 (read as the mean of its last 5 evaluations; 95% intervals" in text and "P(reaching 0.6 within 3 compute)" in text


def test_a_peers_log_answers_with_a_speeds_file(tmp_path, capsys):
    c = np.linspace(0.0, 3000.0, 31)  # a peer's GPU-hours, no wall time
    r = sigmoid(c, 0.65, 1.8, 1500.0, 0.25) + np.r_[0.0, 0.005 * np.random.default_rng(1).standard_normal(30)]
    log = write_csv(tmp_path / "peer.csv", c, r)
    speeds = tmp_path / "speeds.json"  # 8 GPUs: 450 s of wall time per GPU-hour
    speeds.write_text(json.dumps({"seconds_per_compute": 450.0, "devices": 8, "roles": {
        "gen_device_s": 60.0, "learner_device_s": 20.0, "sync_s": 1.0, "eval_s": 0.0, "generators": 6,
        "learner_devices": 2, "k": 8}}))
    assert main(["plan", str(log), "--target", "0.6", "--speeds", str(speeds), "--json", str(tmp_path / "p.json")]) == 0
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["hours"]["median"] == pytest.approx(data["compute"]["median"] * 450.0 / 3600.0, rel=1e-6)
    assert data["device_hours"]["median"] == pytest.approx(8 * data["hours"]["median"], rel=1e-6)
    # 6 + 2: max(60 / 6, 20 / 2 + 1) = 11 s; 7 + 1: max(8.6, 21); 5 + 3: max(12, 7.7): 6 + 2 is best
    assert data["throughput"]["recommended"]["generators"] == 6
    assert data["throughput"]["current"]["step_s"] == pytest.approx(11.0)
    assert data["p_reach"] is None  # no budget asked, and a peer's log says none of its own


def test_a_target_the_run_already_reads_is_answered_from_its_records(tmp_path, capsys):
    records = _records()
    run = _run_folder(tmp_path / "run", records)
    evals = [r for r in records if "val_pass_rate" in r]
    reads = np.convolve([r["val_pass_rate"] for r in evals], np.ones(5) / 5)[: len(evals)]
    target = float(reads[-1]) - 0.005  # the last read is above it, and maybe some before
    first = evals[int(np.flatnonzero(reads >= target)[0])]
    assert main(["plan", str(run), "--target", f"{target:.6f}", "--json", str(tmp_path / "plan.json")]) == 0
    assert "already reached: the mean of its last 5 evaluations" in " ".join(capsys.readouterr().out.split())
    answer = json.loads((tmp_path / "plan.json").read_text())
    assert answer["already"] and answer["hours"]["median"] == pytest.approx(first["wall_s"] / 3600.0)
    assert answer["compute"]["lo"] == answer["compute"]["hi"] == pytest.approx(first["compute_gpu_hours"])


def test_window_0_answers_for_the_expected_curve_and_reads_count_after_the_data(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", _records())
    answers = {}
    for window in ("0", "5"):
        out = tmp_path / f"w{window}.json"
        assert main(["plan", str(run), "--target", "0.66", "--window", window, "--json", str(out)]) == 0
        answers[window] = json.loads(out.read_text())
    assert "(read as its expected curve; 95% intervals)" in capsys.readouterr().out
    fit = answers["0"]["forecast"]["fit"]
    assert answers["0"]["compute"]["median"] == pytest.approx(
        float(compute_for_reward(0.66, fit["A"], fit["B"], fit["C_mid"], fit["R0"])), rel=0.02)
    assert answers["5"]["window"] == 5 and answers["5"]["compute"]["lo"] >= answers["5"]["clock"]["now_compute"]


def _speeds(tmp_path: Path, data) -> Path:
    path = tmp_path / f"speeds{len(list(tmp_path.glob('speeds*.json')))}.json"
    path.write_text("[" * 50_000 if data is None else json.dumps(data))
    return path


def test_too_few_evaluations_and_no_wall_time_are_answers_not_errors(tmp_path, capsys):
    """A run with 2 evaluations says how many more it needs; a peer's log without wall time
    answers in compute and says how to get hours; both exit 0."""
    run = _run_folder(tmp_path / "run", _records(steps=10, every=10))
    assert main(["plan", str(run), "--target", "0.6"]) == 0
    c = np.linspace(0.0, 3000.0, 31)
    log = write_csv(tmp_path / "peer.csv", c, sigmoid(c, 0.65, 1.8, 1500.0, 0.25))
    assert main(["plan", str(log), "--target", "0.6"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "too few evaluations of val_pass_rate for a forecast: 2 of the 6 it needs, 4 more (about step" in out
    assert "no wall time in the log: no hours (give --speeds FILE for them)" in out
    assert "target 0.6 (read as the mean of its last 5 evaluations; 95% intervals): compute" in out


def _one_sentence(capsys, code: int, needle: str) -> None:
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert needle in err, err


@pytest.mark.parametrize("case", ["no target", "target above 1", "speeds without devices",
                                  "no metrics in the folder", "negative window", "speeds of the wrong shape",
                                  "speeds nested deep", "budget in hours without a clock"])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, capsys, case):
    run = _run_folder(tmp_path / "run", _records(steps=10, every=10))  # 2 evaluations
    c = np.linspace(0.0, 3000.0, 31)
    log = write_csv(tmp_path / "peer.csv", c, sigmoid(c, 0.65, 1.8, 1500.0, 0.25))
    speeds = tmp_path / "speeds.json"
    speeds.write_text(json.dumps({"seconds_per_compute": 450.0}))
    (tmp_path / "empty").mkdir()
    args, needle = {
        "no target": (["plan", str(run)], "--target"),
        "target above 1": (["plan", str(run), "--target", "1.5"], "--target must be a pass rate in [0, 1], got 1.5."),
        "speeds without devices": (["plan", str(log), "--target", "0.6", "--speeds", str(speeds)],
                                   "speeds.json: devices: Field required"),
        "speeds of the wrong shape": (["plan", str(log), "--target", "0.6", "--speeds", str(_speeds(tmp_path, {
            "seconds_per_compute": 2.0, "devices": 8, "roles": "abc"}))], "roles: Input should be a valid dictionary"),
        "speeds nested deep": (["plan", str(log), "--target", "0.6", "--speeds", str(_speeds(tmp_path, None))],
                               "nested too deeply"),
        "budget in hours without a clock": (["plan", str(log), "--target", "0.6", "--budget-hours", "2"],
                                            "has no wall time (wall_s)"),
        "no metrics in the folder": (["plan", str(tmp_path / "empty"), "--target", "0.6"], "without metrics.jsonl"),
        "negative window": (["plan", str(run), "--target", "0.6", "--window", "-1"], "--window must be 0"),
    }[case]
    try:
        code = main(args)
    except SystemExit as exit_:  # argparse's own errors (a missing flag) exit from parse_args
        code = exit_.code
    _one_sentence(capsys, code, needle)
