"""The sweep report: seeds pooled per recipe, then the fit package's comparison."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scalerl.experiments.report import pooled_curve, write_report
from scalerl.fit import sigmoid


def _write_run(run_dir, A, B, C_mid, seed, n=40, R0=0.1):
    """A metrics.jsonl whose evaluations follow Eq. 1 with small noise (like ``scalerl train``)."""
    run_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    compute = np.linspace(0.0, 4.0 * C_mid, n) + seed * 1e-3  # seeds evaluate at other computes
    reward = np.clip(sigmoid(compute, A, B, C_mid, R0) + rng.normal(0, 0.003, n), 0, 1)
    reward[0] = R0
    with (run_dir / "metrics.jsonl").open("w") as f:
        for step, (c, r) in enumerate(zip(compute, reward)):
            f.write(json.dumps({"step": step, "compute_gpu_hours": float(c), "loss": 0.1}) + "\n")
            f.write(json.dumps({"step": step, "compute_gpu_hours": float(c), "val_pass_rate": float(r)}) + "\n")
    return run_dir


def test_pooled_curve_merges_seeds_and_averages_equal_compute(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"compute_gpu_hours": 0.0, "val_pass_rate": 0.2}\n{"compute_gpu_hours": 1.0, "val_pass_rate": 0.4}\n')
    b.write_text('{"compute_gpu_hours": 0.0, "val_pass_rate": 0.4}\n{"compute_gpu_hours": 2.0, "val_pass_rate": 0.5}\n')
    curve = pooled_curve("r", [a, b])
    np.testing.assert_allclose(curve.compute, [0.0, 1.0, 2.0])
    np.testing.assert_allclose(curve.reward, [0.3, 0.4, 0.5])  # (0.2 + 0.4) / 2 at compute 0


def test_report_ranks_the_higher_asymptote_and_writes_every_file(tmp_path):
    runs = {
        "scalerl": [_write_run(tmp_path / "scalerl" / f"seed{s}", 0.60, 2.0, 50.0, s) for s in (0, 1)],
        "loo-dapo": [_write_run(tmp_path / "loo-dapo" / f"seed{s}", 0.45, 2.0, 50.0, 10 + s) for s in (0, 1)],
    }
    written = write_report(runs, tmp_path)
    names = {p.name for p in written}
    assert {"report.md", "report.html", "comparison.json"} <= names
    data = json.loads((tmp_path / "comparison.json").read_text())
    # A 0.60 vs 0.45 differ by more than the 0.02 margin: the asymptote decides (paper §1.4)
    assert data["verdict"]["winner"] == "scalerl" and data["verdict"]["decided_by"] == "asymptote"
    fitted = {r["run"]: r["A"] for r in data["runs"]}
    assert fitted["scalerl"] == pytest.approx(0.60, abs=0.03)
    assert fitted["loo-dapo"] == pytest.approx(0.45, abs=0.03)
    assert "loo" in data


def test_report_pooled_compares_the_joint_fit(tmp_path, capsys):
    from scalerl.cli import main

    for name, A in (("scalerl", 0.60), ("loo-dapo", 0.50), ("loo-fp32", 0.55)):
        _write_run(tmp_path / name / "seed0", A, 2.0, 50.0, int(A * 100))
    assert main(["report", str(tmp_path), "--pooled"]) == 0
    text = (tmp_path / "study.md").read_text()
    assert "Joint fit of 3 points: B and C_mid partially pooled" in text
