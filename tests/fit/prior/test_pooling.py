"""Runs of one study fitted jointly (``scalerl.fit.prior.pooling``, ``scalerl compare --pooled``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.fit import FitOptions, sigmoid
from scalerl.fit.prior.pooling import joint_fit
from scalerl.fit.readers import Curve

from .._files import write_csv

B, C_MID = 1.9, 2500.0  # the study's shared shape
CEILINGS = (0.55, 0.60, 0.65, 0.70, 0.62)


def study(seed: int = 0) -> list[Curve]:
    """Five recipes with one shape and their own ceilings; the last is short and noisy."""
    rng, curves = np.random.default_rng(seed), []
    for i, A in enumerate(CEILINGS):
        short = i == len(CEILINGS) - 1
        c = np.linspace(0.0, 6000.0 if short else 16000.0, 16 if short else 41)
        y = np.clip(sigmoid(c, A, B, C_MID, 0.3) + rng.normal(0, 0.03 if short else 0.005, c.size), 0, 1)
        y[0] = 0.3
        curves.append(Curve(f"r{i}", c, y, f"r{i}.csv"))
    return curves


def test_pooling_pulls_a_weak_run_toward_the_study_shape_and_keeps_each_ceiling():
    joint = joint_fit(study(), FitOptions())
    assert np.exp(joint.mu[0]) == pytest.approx(B, rel=0.15) and np.exp(joint.mu[1]) == pytest.approx(C_MID, rel=0.15)
    weak_alone, weak = joint.alone["r4"], joint.fits["r4"]
    assert abs(np.log(weak.C_mid / C_MID)) <= abs(np.log(weak_alone.C_mid / C_MID))
    assert abs(np.log(weak.B / B)) <= abs(np.log(weak_alone.B / B))
    for name, A in zip(joint.fits, CEILINGS[:4]):  # the precise runs keep their own ceilings
        assert joint.fits[name].A == pytest.approx(A, abs=0.02)
    assert "partially pooled" in weak.message


def test_compare_pooled_reads_the_joint_fit(tmp_path, capsys):
    files = [str(write_csv(tmp_path / f"{c.name}.csv", c.compute, c.reward)) for c in study()]
    out = tmp_path / "cmp.json"
    assert main(["compare", *files, "--pooled", "--no-budget", "--baseline", "r0", "--json", str(out)]) == 0
    assert "Joint fit of 5 runs" in capsys.readouterr().out
    data = json.loads(out.read_text())
    pooled = data["pooled"]["runs"]
    for row in data["loo"]["rows"]:
        assert row["B"] == pytest.approx(pooled[row["run"]]["pooled"]["B"])


def test_compare_pooled_needs_three_runs(tmp_path, capsys):
    files = [str(write_csv(tmp_path / f"{c.name}.csv", c.compute, c.reward)) for c in study()[:2]]
    assert main(["compare", *files, "--pooled", "--no-budget"]) == 2
    assert capsys.readouterr().err == "scalerl compare: error: a pooled fit needs at least 3 runs, got 2.\n"
