"""``scalerl fit / compare / demo-fit`` on real files in every input format.

Bad input must end with exit code 2 and one sentence on stderr, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PIL import Image

from scalerl.cli import main
from scalerl.fit import plot

from .._files import (
    TRUE,
    synthetic_curve,
    write_csv,
    write_jsonl,
    write_tensorboard,
    write_wandb_csv,
)
from ..prior.test_prior import _recorded


@pytest.fixture(scope="module")
def curve():
    return synthetic_curve(n=41)  # every 400 GPU-hours to 16k


def _csv(d, c):
    return [str(write_csv(d / "run.csv", *c))]


def _jsonl(d, c):
    return [str(write_jsonl(d / "metrics.jsonl", *c))]


def _tensorboard(d, c):
    return [str(write_tensorboard(d / "tb", *c))]


def _wandb(d, c):
    # steps are 10 apart and points 400 GPU-hours apart: 40 GPU-hours per step
    return [str(write_wandb_csv(d / "wandb.csv", {"run": c})), "--step-to-compute", "40"]


@pytest.mark.parametrize("writer", [_csv, _jsonl, _tensorboard, _wandb])
def test_fit_every_format_recovers_table1_and_writes_json_and_png(tmp_path, curve, writer, capsys):
    args = writer(tmp_path, curve)
    out_json, out_png = tmp_path / "fit.json", tmp_path / "fit.png"
    rc = main(["fit", *args, "--no-budget", "--target-compute", "32000",
               "--target-reward", "0.9", "--json", str(out_json), "--plot", str(out_png)])  # fmt: skip
    assert rc == 0
    stdout = " ".join(capsys.readouterr().out.split())
    assert "Sigmoid fits" in stdout and "not reachable" in stdout
    (run,) = json.loads(out_json.read_text())["runs"]
    assert run["fit"]["A"] == pytest.approx(TRUE["A"], abs=0.01)
    assert run["fit"]["B"] == pytest.approx(TRUE["B"], rel=0.1)
    lo, hi = run["intervals"]["A"]
    assert lo < run["fit"]["A"] < hi
    (fc,) = run["forecasts"]
    assert fc["lo"] <= fc["reward"] <= fc["hi"] and fc["compute"] == 32000
    (reach,) = run["compute_to_reach"]
    assert reach["reachable"] is False and reach["compute"]["median"] is None  # never -> null (strict JSON)
    assert reach["p_reach_at_all"] < 0.025
    assert Image.open(out_png).size == plot.SIZE_PX


def test_fit_paper_method_uses_the_app_a5_grid(tmp_path, curve):
    path = write_csv(tmp_path / "run.csv", *curve)
    out = tmp_path / "fit.json"
    assert (
        main(["fit", str(path), "--method", "paper", "--no-budget", "--json", str(out)]) == 0
    )
    fit = json.loads(out.read_text())["runs"][0]["fit"]
    assert fit["method"] == "paper"
    assert round(fit["A"] / 0.005) * 0.005 == pytest.approx(fit["A"])  # a grid value of A
    assert fit["A"] == pytest.approx(TRUE["A"], abs=0.01)


def test_fit_holdout_on_half_the_budget(tmp_path, curve, capsys):
    path = write_csv(tmp_path / "run.csv", *curve)
    out = tmp_path / "fit.json"
    assert (
        main(["fit", str(path), "--fit-frac", "0.5", "--no-budget", "--json", str(out)]) == 0
    )
    stdout = capsys.readouterr().out
    assert "Held-out check of the forecast" in stdout and "x = gpu_hours, y = val_pass_rate" in stdout
    (run,) = json.loads(out.read_text())["runs"]
    assert run["holdout"]["fit_until"] == 8000 and run["holdout"]["n_heldout"] == 20
    assert run["holdout"]["rmse"] < 0.01 and run["fit"]["max_compute"] == 8000
    assert run["holdout"]["final"]["width"] == pytest.approx(run["holdout"]["final"]["pred_hi"]
                                                             - run["holdout"]["final"]["pred_lo"])
    final = run["holdout"]["final"]
    assert final["compute"] == 16000 and final["pred_lo"] <= final["predicted"] <= final["pred_hi"]
    assert final["covered"] == (final["pred_lo"] <= final["observed"] <= final["pred_hi"])
    assert isinstance(run["fit"]["identified"], bool) and len(run["fit"]["A_plausible"]) == 2


def test_fit_pool_seeds_reports_pooled_fit_and_spread(tmp_path, capsys):
    paths = [str(write_csv(tmp_path / f"seed{i}.csv", *synthetic_curve(seed=i))) for i in range(3)]
    out = tmp_path / "pool.json"
    assert main(["fit", *paths, "--pool", "--no-budget", "--json", str(out)]) == 0
    assert "Across-seed spread (half range) over 3 seeds: A ±" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert [r["run"] for r in data["runs"]] == ["seed0", "seed1", "seed2", "pooled (3 seeds)"]
    per_seed_A = [r["fit"]["A"] for r in data["runs"][:3]]
    assert data["pooled"]["spread"]["A"] == pytest.approx((max(per_seed_A) - min(per_seed_A)) / 2)
    assert data["runs"][3]["fit"]["n_points"] == 3 * 40  # every seed's points but step 0


def test_compare_writes_figure_html_markdown_json(tmp_path, capsys):
    paths = []
    for name, A, B in (("scalerl", 0.61, 2.1), ("loo-dapo", 0.60, 1.6)):
        paths.append(str(write_csv(tmp_path / f"{name}.csv", *synthetic_curve(A=A, B=B))))
    o = tmp_path / "out"
    o.mkdir()
    rc = main(["compare", *paths, "--no-budget", "--baseline", "scalerl", "--fit-frac", "0.5",
               "--plot", str(o / "c.png"), "--html", str(o / "r.html"),
               "--markdown", str(o / "r.md"), "--json", str(o / "c.json")])  # fmt: skip
    assert rc == 0
    stdout = capsys.readouterr().out
    assert "Verdict (efficiency): scalerl wins on efficiency" in stdout and "Leave-one-out table" in stdout
    assert Image.open(o / "c.png").size == plot.SIZE_PX
    page = (o / "r.html").read_text()
    assert "data:image/png;base64," in page and "https://" not in page and "http://" not in page
    data = json.loads((o / "c.json").read_text())
    assert data["verdict"]["winner"] == "scalerl" and len(data["extrapolation"]) == 2
    assert data["verdict"]["decided_by"] == "efficiency" and data["verdict"]["reasons"]
    assert (o / "r_efficiency.png").is_file()


def test_demo_fit_writes_its_outputs(tmp_path, capsys):
    assert main(["demo-fit", "--out", str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    assert "SYNTHETIC" in stdout and "wins on the asymptote" in stdout
    for name in ("forecast.png", "compare.png", "efficiency.png", "compare.html", "summary.json"):
        assert (tmp_path / name).is_file()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["forecast"]["forecast"]["compute"] == 15900


BAD_CSV = {
    "empty.csv": ("", "empty.csv is empty"),
    "nocol.csv": ("step,gpu_hours\n0,0\n", "its columns are: step, gpu_hours"),
    "inf.csv": ("gpu_hours,reward\n0,0.3\n1,inf\n", "inf.csv line 3: 'reward' is 'inf'"),
    "down.csv": (
        "gpu_hours,reward\n0,0.3\n5,0.4\n4,0.5\n",
        "down.csv line 4: compute 'gpu_hours' = 4 does not increase",
    ),  # fmt: skip
    "range.csv": (
        "gpu_hours,reward\n0,0.3\n1,1.7\n",
        "line 3: reward 'reward' = 1.7 is outside [0, 1]",
    ),  # fmt: skip
}


@pytest.mark.parametrize(("content", "said"), [
    ("gpu_hours,reward\n" + "".join(f"{i},{'NaN' if i == 3 else '' if i == 5 else 0.3 + 0.01 * i}\n" for i in range(12)),
     "(10 points)"),  # NaN and a blank are both missing: one policy, both rows skipped
    ("gpu_hours,reward\n0,0.3\n1,0.4\n2,0.5\n", "too few evaluations of reward for a forecast: 3 of the 6 it needs"),
    ("gpu_hours,reward\n" + "".join(f"{i},0.4\n" for i in range(9)), "not learning: no rise detected"),
])  # fmt: skip
def test_a_short_or_flat_curve_is_a_state_with_exit_0_not_an_error(tmp_path, content, said, capsys):
    (tmp_path / "run.csv").write_text(content)
    assert main(["fit", str(tmp_path / "run.csv"), "--no-budget", "--target-reward", "0.6"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert said in out and "Traceback" not in out


@pytest.mark.parametrize("name", sorted(BAD_CSV))
def test_bad_curve_files_exit_2_with_one_sentence(tmp_path, name, capsys):
    content, expected = BAD_CSV[name]
    (tmp_path / name).write_text(content)
    assert main(["fit", str(tmp_path / name), "--no-budget"]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["fit", "{d}/missing.csv"], "missing.csv does not exist."),
        (["fit", "{d}/*.nothing"], "no file matches"),
        (["fit", "{d}/ok.csv", "--fit-frac", "1.5"], "--fit-frac must lie in (0, 1]"),
        (["fit", "{d}/ok.csv", "--y", "acc"], "has no reward column 'acc'"),
        (
            ["fit", "{d}/ok.csv", "--plot", "{d}/ok.csv/x.png", "--no-budget"],
            "a file stands where its folder should be",
        ),
        (["compare", "{d}/ok.csv", "{d}/ok.csv"], "compare needs at least two runs, got 1."),
        (["compare", "{d}/ok.csv", "{d}/missing.csv"], "missing.csv does not exist."),
        (["demo-fit", "--out", "{d}/ok.csv/demo"], "cannot write"),
        (["fit", "{d}/ok.csv", "--pool"], "--pool needs at least two runs (seeds), got 1."),
        (["fit", "{d}/ok*.csv", "--pool", "--fit-frac", "0.5"], "use it without --fit-frac"),
        (["compare", "{d}/ok.csv", "--margin", "-1"], "--margin must be 0 or more"),
        (["fit", "{d}/ok.csv", "--level", "95"], "--level must lie in (0, 1), got 95."),
        (["fit", "{d}/ok.csv", "--target-compute", "-5"], "--target-compute must be a positive compute"),
        (["fit", "{d}/ok.csv", "--target-reward", "1.5"], "--target-reward must be a pass rate in [0, 1]"),
        (["fit", "{d}/ok.csv", "--margin", "-0.1"], "--margin must be 0 or more"),
        (["fit", "{d}/ok.csv", "--margin", "nan"], "--margin must be 0 or more"),
        (["fit", "{d}/ok.csv", "--min-compute", "-5"], "--min-compute must be 0 or more"),
        (["fit", "{d}/ok.csv", "--max-compute", "-1"], "--max-compute must be a positive compute, got -1."),
        (
            ["compare", "{d}/ok.csv", "{d}/ok2.csv", "--baseline", "zzz", "--no-budget"],
            "baseline 'zzz' is not one of the runs",
        ),  # fmt: skip
    ],
)
def test_bad_arguments_exit_2_with_one_sentence(tmp_path, curve, argv, expected, capsys):
    write_csv(tmp_path / "ok.csv", *curve)
    write_csv(tmp_path / "ok2.csv", *curve)
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_flag_values_exit_2_with_one_sentence(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "x.csv", "--r0", "abc"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --r0: must be a number, 'first' or 'fit'" in err and err.count("\n") == 1


def test_subprocess_bad_input_has_no_traceback_and_fit_imports_no_torch(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"compute": 1, "reward": 0.3}\n{"compute": 2, "reward": Infinity}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "scalerl.cli", "fit", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"scalerl fit: error: {bad} line 2: 'reward' is inf; NaN and inf are not allowed.\n"  # fmt: skip
    probe = "import sys, scalerl.fit.commands.fit, scalerl.fit.plot, scalerl.fit.commands.plan; print(sorted({'torch', 'matplotlib'} & set(sys.modules)))"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # fit never needs torch; matplotlib only when plotting


def test_fit_json_contract_budget_advice_and_both_bands(tmp_path, capsys):
    c, r = synthetic_curve(n=41)
    path = write_csv(tmp_path / "half.csv", c[c <= 8000], r[c <= 8000])
    out = tmp_path / "fit.json"
    assert main(["fit", str(path), "--target-compute", "16000", "--json", str(out),
                 "--html", str(tmp_path / "fit.html")]) == 0  # fmt: skip
    stdout = capsys.readouterr().out
    (run,) = json.loads(out.read_text())["runs"]
    fit = run["fit"]
    assert set(fit) >= {"identified", "A_plausible", "budget_to_pin_A"}
    assert fit["A_plausible"][0] <= fit["A"] <= fit["A_plausible"][1]
    assert fit["budget_to_pin_A"] is None or fit["budget_to_pin_A"] >= 1.0
    (fc,) = run["forecasts"]
    assert fc["pred_lo"] <= fc["lo"] <= fc["reward"] <= fc["hi"] <= fc["pred_hi"]
    assert "ceiling" in stdout and "to pin A" in stdout
    page = (tmp_path / "fit.html").read_text()
    assert "data:image/png;base64," in page and "band on the expected curve" in page


def test_a_curve_too_short_to_calibrate_still_fits_and_says_so(tmp_path, capsys):
    c, r = synthetic_curve(n=41)
    path = write_csv(tmp_path / "short.csv", c[:8], r[:8])
    assert main(["fit", str(path), "--no-budget"]) == 0
    stdout = capsys.readouterr().out
    assert "interval not calibrated" in stdout and "too few for a held-out check" in stdout


def test_python_dash_m_scalerl_is_the_scalerl_command(tmp_path):
    path = write_csv(tmp_path / "ok.csv", *synthetic_curve(n=21))
    proc = subprocess.run([sys.executable, "-m", "scalerl", "fit", str(path), "--no-budget"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Sigmoid fits (Eq. 1)" in proc.stdout


def test_fit_reads_an_unbiased_pass_at_k_column(tmp_path, curve, capsys):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": 10 * i, "compute_gpu_hours": float(c), "val_pass_rate": float(r) / 2,
                         "val_pass_at_4": float(r)}) for i, (c, r) in enumerate(zip(*curve))]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "fit.json"
    assert main(["fit", str(path), "--y", "val_pass_at_4", "--no-budget", "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["y"] == "val_pass_at_4" and run["fit"]["A"] == pytest.approx(TRUE["A"], abs=0.01)


def test_fit_of_a_falling_curve_withholds_the_budget_advice(tmp_path, capsys):
    """'The forecasts are not to be trusted' is never followed by compute that would pin A."""
    path = write_csv(tmp_path / "falls.csv", *synthetic_curve(A=0.20, R0=0.50, n=21))
    out = tmp_path / "fit.json"
    assert main(["fit", str(path), "--json", str(out)]) == 0  # budget advice asked for
    text = " ".join(capsys.readouterr().out.split())
    assert "the curve falls" in text and "its forecasts are not to be trusted" in text
    assert ("falls: to pin A to ±0.02: withheld: the curve falls, so no forecast of it, this one included, "
            "is to be trusted.") in text
    assert "the compute so far" not in text and "within 100x" not in text
    (run,) = json.loads(out.read_text())["runs"]
    assert run["fit"]["budget_to_pin_A"] is None and run["fit"]["budget_advice"].startswith("withheld: the curve falls")


def test_fit_names_the_metric_it_fitted_in_every_output(tmp_path, curve, capsys, monkeypatch):
    path = write_csv(tmp_path / "run.csv", *curve, y="val_reward_mean")
    out, page = tmp_path / "fit.json", tmp_path / "fit.html"
    figures = _recorded(monkeypatch, "fit_figure")
    assert main(["fit", str(path), "--y", "val_reward_mean", "--no-budget", "--json", str(out), "--html", str(page),
                 "--plot", str(tmp_path / "fit.png")]) == 0  # fmt: skip
    assert "Sigmoid fits (Eq. 1) of val_reward_mean against gpu_hours" in " ".join(capsys.readouterr().out.split())
    assert json.loads(out.read_text())["runs"][0]["y"] == "val_reward_mean"
    assert "<title>scalerl fit: val_reward_mean</title>" in page.read_text()
    (ax,) = figures
    assert "val_reward_mean" in ax.get_title() and ax.get_ylabel() == "val_reward_mean"
