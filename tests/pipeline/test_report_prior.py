"""The end-of-run report forecasts under the run folder's ``forecast.prior_runs``, as ``scalerl
fit RUN_DIR`` does (one prior per run, wherever its forecast is made)."""

from __future__ import annotations

import json

import numpy as np

from scalerl.cli import main
from scalerl.config import load_config
from scalerl.fit.law import sigmoid
from scalerl.pipeline.commands.report import final_report


def _run(folder, seed: int) -> None:
    """A finished run folder's metrics: 41 evaluations of one population's sigmoid."""
    rng = np.random.default_rng(seed)
    c = 0.1 * np.arange(1, 42)
    r0, gain, b, mid = rng.uniform(0.15, 0.25), rng.uniform(0.45, 0.55), rng.uniform(1.6, 2.2), rng.uniform(1.0, 1.6)
    y = np.clip(sigmoid(c, r0 + gain, b, mid, r0) + 0.02 * rng.standard_normal(c.size), 0, 1)
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": 10 * i, "compute_gpu_hours": float(ci),
                                                              "val_pass_rate": float(yi)}) + "\n"
                                                  for i, (ci, yi) in enumerate(zip(c, y))))  # fmt: skip


def test_the_reports_fit_to_half_check_is_fits_under_the_runs_prior(tmp_path):
    for i in range(6):
        _run(tmp_path / f"done{i}", i + 1)
    new = tmp_path / "new"
    _run(new, 50)
    (new / "config.yaml").write_text(json.dumps({"forecast": {"prior_runs": str(tmp_path)}}))  # YAML holds JSON
    lines: list[str] = []
    final_report(new, load_config("scalerl", []), log=lines.append)
    (half,) = [line for line in lines if line.startswith("fit-to-half check: ")]
    assert main(["fit", str(new), "--fit-frac", "0.5", "--json", str(tmp_path / "fit.json")]) == 0
    (run,) = json.loads((tmp_path / "fit.json").read_text())["runs"]
    final = run["holdout"]["final"]
    assert f"({run['forecast']['method']}), at the end: {final['predicted']:.3f}," in half, half
    assert f"in [{final['pred_lo']:.3f}, {final['pred_hi']:.3f}]" in half
    assert run["forecast"]["method"] == "prior"  # the six finished runs' prior, the run's own folder left out
    assert "Intervals from the prior learned from finished runs." in " ".join(lines)
