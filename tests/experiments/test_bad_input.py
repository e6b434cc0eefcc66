"""``scalerl report`` and ``scalerl sweep`` on bad input: exit code 2, one sentence naming the
real source (the spec file, its axis and line; the output flag), nothing written or created.

The commands run in-process through ``scalerl.cli.main``: an exception escaping it is the
traceback a user would have seen, and fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.config import ConfigError
from scalerl.fit import sigmoid


def _run(capsys, *args: str) -> str:
    """The one stderr line of a refused command."""
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def _study(tmp_path: Path) -> Path:
    root = tmp_path / "study"
    (root / "scalerl" / "seed0").mkdir(parents=True)
    compute = np.linspace(0.0, 8000.0, 21)  # a clean Eq. 1 curve, as ``scalerl train`` logs it
    reward = sigmoid(compute, 0.6, 1.9, 2500.0, 0.3)
    lines = [json.dumps({"step": 10 * i, "compute_gpu_hours": float(c), "val_pass_rate": float(r)})
             for i, (c, r) in enumerate(zip(compute, reward))]
    (root / "scalerl" / "seed0" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_report_onto_a_runs_log_is_refused_and_the_log_kept(tmp_path, capsys):
    root = _study(tmp_path)
    log = root / "scalerl" / "seed0" / "metrics.jsonl"
    before = log.read_bytes()
    err = _run(capsys, "report", str(root), "--html", str(root / "scalerl" / "." / "seed0" / "metrics.jsonl"))
    assert "--html" in err and f"is the input {log}" in err
    assert log.read_bytes() == before and not (root / "study.md").exists()


def test_report_with_one_file_for_both_outputs_is_refused(tmp_path, capsys):
    root = _study(tmp_path)
    err = _run(capsys, "report", str(root), "--html", str(tmp_path / "r.out"), "--markdown", str(tmp_path / "r.out"))
    assert "--markdown" in err and "are the same file" in err
    assert not (tmp_path / "r.out").exists()


@pytest.mark.parametrize("where", ["a file as its folder", "/proc"])
def test_report_to_an_unwritable_path_is_one_sentence(tmp_path, capsys, where):
    if where == "/proc" and not Path("/proc/self").exists():
        pytest.skip("no /proc on this system")
    root = _study(tmp_path)
    (tmp_path / "file").write_text("x")
    html = tmp_path / "file" / "x.html" if where != "/proc" else Path("/proc/scalerl-x.html")
    err = _run(capsys, "report", str(root), "--html", str(html), "--markdown", str(tmp_path / "s.md"))
    assert err.startswith((f"scalerl report: cannot write {html}: ", f"scalerl report: --html {html}: "))


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("axes", "expected"), [
    ("  model: [nano, giant]\n", "spec.yaml line 4, 'axes.model': unknown model preset 'giant'; choose one of"),
    ("  batch: [2]\n  length: [1]\n",
     "spec.yaml line 5, 'axes.length': the length value 1 makes recipe 'scalerl' invalid (length.interrupt_range"),
])
def test_a_bad_axis_value_names_the_spec_axis_and_creates_nothing(tmp_path, capsys, axes, expected):
    spec = _spec(tmp_path, "recipes: [scalerl]\nseeds: [0]\naxes:\n" + axes)
    out = tmp_path / "out"
    err = _run(capsys, "sweep", str(spec), "--out", str(out))
    assert expected in err and "--set" not in err, err
    assert not out.exists()


def test_an_unknown_preset_from_the_specs_set_names_the_spec(tmp_path, capsys):
    spec = _spec(tmp_path, "recipes: [scalerl]\nset:\n  model.preset: huge\n")
    err = _run(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"))
    assert f"{spec}, recipe 'scalerl': model.preset 'huge'" in err and "is not a model preset" in err
    assert not (tmp_path / "out").exists()


def test_the_shortcut_sweep_checks_the_preset_and_names_a_bad_seed(tmp_path):
    from scalerl.experiments.sweep import plan

    with pytest.raises(ConfigError, match=r"recipe 'scalerl': model.preset 'giant' .*is not a model preset"):
        plan(["scalerl"], [0], ["model.preset=giant"], tmp_path)
    with pytest.raises(ConfigError, match=r"--set sampling.max_new_tokens"):  # a real --set is still named
        plan(["scalerl"], [0], ["sampling.max_new_tokens=1"], tmp_path)
