"""Sweep specs (one sentence per mistake, with its line) and a tiny real sweep with its report."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scalerl.config import ConfigError
from scalerl.experiments.spec import load_spec, points

ROOT = Path(__file__).resolve().parents[2]
GOOD = """\
name: tiny
recipes: [scalerl]
seeds: [0, 1]
set:
  train.steps: 3
axes:
  batch: [2, 4]
  length: [40]
"""


def _spec(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_points_are_named_after_their_values(tmp_path):
    spec = load_spec(_spec(tmp_path, GOOD))
    pts = points(spec, tmp_path / "out")
    assert [(p.values, p.seed) for p in pts] == [
        ((("batch", 2), ("length", 40)), 0), ((("batch", 2), ("length", 40)), 1),
        ((("batch", 4), ("length", 40)), 0), ((("batch", 4), ("length", 40)), 1)]
    assert pts[3].run_dir == tmp_path / "out" / "scalerl" / "batch=4,length=40" / "seed1"
    cfg = pts[3].config
    assert cfg.pipeline.prompts_per_step == 4 and cfg.sampling.max_new_tokens == 40 and cfg.train.steps == 3
    lo, hi = cfg.length.interrupt_range
    assert 0 < lo <= hi < 40  # the interruption range scales with the budget


def test_generations_axis_keeps_the_total_batch(tmp_path):
    spec = load_spec(_spec(tmp_path, "recipes: [scalerl]\naxes:\n  generations: [4, 16]\n"))
    cfgs = [p.config.pipeline for p in points(spec, tmp_path)]
    assert [(c.generations, c.prompts_per_step) for c in cfgs] == [(4, 16), (16, 4)]
    spec = load_spec(_spec(tmp_path, "recipes: [scalerl]\naxes:\n  generations: [5]\n"))
    with pytest.raises(ConfigError, match="generations=5 does not divide the total batch 64"):
        points(spec, tmp_path)


@pytest.mark.parametrize("text, message", [
    ("recipes: [scalerl]\naxes:\n  batch: [2]\n  depth: [3]\n", r"line 4, 'axes.depth': unknown axis 'depth'"),
    ("recipes: [scalerl]\naxes:\n  batch: []\n", r"line 3, 'axes.batch': the grid is empty"),
    ("recipes: []\n", r"line 1, 'recipes': give a non-empty list"),
    ("recipes: [scalerl]\naxes:\n  batch: [two]\n", r"line 3, 'axes.batch': each batch value must be an integer; got 'two'"),
    ("recipes: [scalerl]\nseeds: [0, x]\n", r"line 2, 'seeds': each seed must be an integer"),
    ("recipes: [scalerl]\nparalel: 2\n", r"line 2, 'paralel': unknown key"),
    ("recipes: [scalerl]\nrunner: slurm\n", r"line 2, 'runner': one of local, ray"),
    ("recipes: [scalerl]\nseeds: [0, 1, 0]\n", r"line 2, 'seeds': the seed 0 repeats"),
    ("recipes: [scalerl]\naxes:\n  batch: [4, 4]\n", r"line 3, 'axes.batch': the batch value 4 repeats"),
    ("recipes: [scalerl, a/scalerl.yaml]\n", r"line 1, 'recipes': the recipe name 'scalerl' repeats"),
    ("recipes: [scalerl\n", r"spec.yaml line 2: not valid YAML \(expected ',' or ']'"),
])
def test_malformed_specs_are_one_sentence_with_their_line(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_spec(_spec(tmp_path, text))


def test_points_that_would_share_a_folder_are_refused(tmp_path):
    import dataclasses

    spec = dataclasses.replace(load_spec(_spec(tmp_path, "recipes: [scalerl]\n")), seeds=(1, 1))  # --seeds 1 1
    with pytest.raises(ConfigError, match=r"spec.yaml: scalerl seed 1 and scalerl seed 1 would both train into"):
        points(spec, tmp_path / "out")


def test_a_recipe_that_does_not_exist_names_the_spec(tmp_path):
    spec = load_spec(_spec(tmp_path, "recipes: [no-such-recipe]\n"))
    with pytest.raises(ConfigError, match=r"spec.yaml, recipe 'no-such-recipe'"):
        points(spec, tmp_path)


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "scalerl", *args], capture_output=True, text=True, timeout=timeout)



def test_cli_bad_spec_exits_2_without_a_traceback(tmp_path):
    run = _cli("sweep", str(_spec(tmp_path, "recipes: [scalerl]\naxes:\n  depth: [1]\n")), "--out", str(tmp_path / "o"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1 and "unknown axis 'depth'" in run.stderr


def _tables(markdown: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells; every row of a table has the header's width."""
    tables, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    for t in tables:
        assert len({len(r) for r in t}) == 1, t
    return tables


def test_a_tiny_sweep_trains_resumes_and_reports(tmp_path, warm_model_dir, cli_here):
    """The sweep that trains runs as a user runs it (its points are ``scalerl train``
    subprocesses either way); the calls after it, which read the finished folder, run in this
    process (``test_cli_bad_spec_exits_2_without_a_traceback`` is the fresh-interpreter refusal)."""
    from PIL import Image

    spec = _spec(tmp_path, f"""\
name: tiny
recipes: [scalerl]
seeds: [0]
set:
  model.base: {warm_model_dir}
  task.knobs: {{min_digits: 1, max_digits: 2}}
  pipeline.backend: inprocess
  pipeline.generations: 4
  pipeline.prompts_per_chunk: 1
  sampling.max_new_tokens: 48
  length.interrupt_range: [30, 36]
  train.steps: 12
  train.max_minutes: null
  optim.lr: 2.0e-4  # the recipe's 5e-5 barely moves a curve in 12 steps
  eval.every: 1
  eval.schedule: every
  eval.num_prompts: 16
  eval.k: 1
  log.progress: false
  log.tensorboard: false
axes:
  batch: [2, 3]
parallel: 2
""")
    out = tmp_path / "sweep"
    run = _cli("sweep", str(spec), "--out", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    dirs = sorted(p.parent.relative_to(out).as_posix() for p in out.rglob("metrics.jsonl"))
    assert dirs == ["scalerl/batch=2/seed0", "scalerl/batch=3/seed0"]
    assert yaml.safe_load((out / "sweep.yaml").read_text())["axes"] == {"batch": [2, 3]}
    again = cli_here("sweep", str(spec), "--out", str(out), "--report-only")
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = cli_here("sweep", str(spec), "--out", str(out))  # every point is finished: nothing retrained
    assert rerun.returncode == 0 and rerun.stdout.count("already finished") == 2
    other = _spec(tmp_path, spec.read_text().replace("batch: [2, 3]", "batch: [2, 5]"))
    refused = cli_here("sweep", str(other), "--out", str(out))
    assert refused.returncode == 2 and "holds a different sweep" in refused.stderr

    report = cli_here("report", str(out), "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md"))
    assert report.returncode == 0, report.stderr[-3000:]
    md = (tmp_path / "r.md").read_text()
    tables = _tables(md)
    half = next(t for t in tables if t[0][0] == "run" and "forecast at the end" in t[0])
    assert len(half) == 2 + 2  # header, separator, one row per run
    # 12 noisy steps may come out flat, and then the half cannot be fitted: each row has a
    # verdict or says why not, however training fell (a verdict on rising curves is
    # test_the_fit_to_half_column_gives_a_rising_run_its_verdict's, which trains nothing)
    assert all(row[-1].startswith(("covered (width ", "NOT covered (width ", "not possible: ")) for row in half[2:])
    assert any(t[0][0] == "batch" for t in tables)  # the per-axis table
    for name in re.findall(r"\]\(([^)]+\.png)\)", md):
        Image.open(tmp_path / name).verify()
    html = (tmp_path / "r.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) >= 4
    for data in images:
        Image.open(io.BytesIO(base64.b64decode(data))).verify()


@pytest.mark.parametrize("spec", sorted((ROOT / "bench" / "paper_claims").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_paper_claim_spec_plans(spec, tmp_path):
    # each claim's sweep validates point by point before hours of training are spent on it
    assert points(load_spec(spec), tmp_path)


def test_a_one_point_sweep_gets_its_study_report(tmp_path, cli_here):
    # one recipe, no axes: nothing to compare, but the curve, its fit and fit-to-half are reported
    import json
    import math

    spec = _spec(tmp_path, "recipes: [scalerl]\nseeds: [0]\nset:\n  train.steps: 30\n")
    run = tmp_path / "out" / "scalerl" / "seed0"
    run.mkdir(parents=True)
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(31):
            c = 0.001 * (step + 1)
            val = 0.2 + 0.5 / (1 + (0.01 / c) ** 1.5) + 0.01 * math.sin(7 * step)
            f.write(json.dumps({"step": step, "compute_gpu_hours": c, "val_pass_rate": val}) + "\n")
    done = cli_here("sweep", str(spec), "--out", str(tmp_path / "out"), "--report-only")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "study.md").is_file() and (tmp_path / "out" / "study.html").is_file()


def test_the_fit_to_half_column_gives_a_rising_run_its_verdict(tmp_path, cli_here):
    """The sweep report's fit-to-half table on two runs whose curves rise (written, not
    trained): each row is covered or NOT covered, never 'not possible'. The tiny real sweep
    above cannot promise that: its 12 steps once came out flat in both runs."""
    import json
    import math

    spec = _spec(tmp_path, "recipes: [scalerl]\nseeds: [0]\nset:\n  train.steps: 30\naxes:\n  batch: [2, 3]\n")
    for batch, ceiling in ((2, 0.5), (3, 0.6)):
        run = tmp_path / "out" / "scalerl" / f"batch={batch}" / "seed0"
        run.mkdir(parents=True)
        with (run / "metrics.jsonl").open("w") as f:
            for step in range(31):
                c = 0.001 * (step + 1)
                val = 0.2 + (ceiling - 0.2) / (1 + (0.01 / c) ** 1.5) + 0.01 * math.sin(7 * step + batch)
                f.write(json.dumps({"step": step, "compute_gpu_hours": c, "val_pass_rate": val}) + "\n")
    done = cli_here("sweep", str(spec), "--out", str(tmp_path / "out"), "--report-only")
    assert done.returncode == 0, done.stderr
    tables = _tables((tmp_path / "out" / "study.md").read_text())
    half = next(t for t in tables if t[0][0] == "run" and "forecast at the end" in t[0])
    assert len(half) == 2 + 2 and all(row[-1].startswith(("covered (width ", "NOT covered (width "))
                                      for row in half[2:]), half  # fmt: skip


def test_the_lr_axis_sets_the_learning_rate_and_reads_1e_4_as_a_number(tmp_path):
    # YAML 1.1 reads 1e-4 (no dot) as a string; the axis takes it as the number it means
    spec = load_spec(_spec(tmp_path, "recipes: [scalerl]\naxes:\n  lr: [1e-4, 3.0e-5]\n"))
    pts = points(spec, tmp_path / "out")
    assert [(p.run_dir.parent.name, p.config.optim.lr) for p in pts] == [("lr=0.0001", 1e-4), ("lr=3e-05", 3e-5)]
    for bad, says in (("[fast]", "each lr value must be a number; got 'fast'"), ("[0]", "must be positive")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_spec(_spec(tmp_path, f"recipes: [scalerl]\naxes:\n  lr: {bad}\n"))
