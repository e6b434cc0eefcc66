"""``scalerl sweep --adaptive``: rung by rung, stopping the points that cannot win.

The rung loop is driven here with a stand-in trainer that writes each point's curve (Eq. 1
with noise) up to ``train.max_compute`` and resumes where it stopped, so the decisions are
checked exactly; the trainer's own ``train.max_compute`` and its resume are tested with real
training in ``tests/pipeline/test_max_compute.py``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scalerl.experiments.adaptive import Adaptive, run_adaptive
from scalerl.experiments.spec import load_spec, points
from scalerl.fit import law
from scalerl.fit.choose import MEASURED, THRESHOLD
from scalerl.runfolder import COMPUTE, VAL_PASS_RATE

CEILING = {2: 0.8, 3: 0.3, 4: 0.5}  # prompts per step -> the point's ceiling A
STEP = 0.01  # compute per evaluation


def fake_train(calls):
    """Append evaluations every ``STEP`` of compute up to ``cfg.train.max_compute`` (it writes
    no checkpoint, so every call is a fresh start to the sweep; what it had is kept)."""

    def train(cfg, run_dir, resume=False, log=print):
        run_dir.mkdir(parents=True, exist_ok=True)
        metrics = run_dir / "metrics.jsonl"
        have = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.exists() else []
        calls.append((run_dir.parent.name, cfg.train.max_compute))
        a = CEILING[cfg.pipeline.prompts_per_step]
        rng = np.random.default_rng(len(have) + 100 * cfg.pipeline.prompts_per_step)
        with metrics.open("a") as f:
            i = len(have)
            while True:
                c = STEP * (i + 1)
                val = float(np.clip(law.sigmoid(c, a, 1.5, 0.2, 0.0) + rng.normal(0, 0.01), 0.0, 1.0))
                f.write(json.dumps({"step": i, COMPUTE: c, VAL_PASS_RATE: val}) + "\n")
                i += 1
                if c >= cfg.train.max_compute - 1e-12:
                    break

    return train


@pytest.fixture
def study(tmp_path, warm_model_dir):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"recipes: [scalerl]\nseeds: [0]\nset:\n  model.base: {warm_model_dir}\n  train.steps: 1000\n"
                    "axes:\n  batch: [2, 3, 4]\nadaptive:\n  budget: 0.64\n  first_rung: 0.08\n")  # fmt: skip
    loaded = load_spec(spec)
    return loaded, points(loaded, tmp_path / "out"), tmp_path / "out"


def test_the_points_that_cannot_win_stop_at_a_rung_and_the_rest_go_on(study):
    spec, variants, out = study
    assert spec.adaptive == Adaptive(budget=0.64, first_rung=0.08)
    calls = []
    d = run_adaptive(variants, out, spec.adaptive, parallel=1, runner="local", train=fake_train(calls),
                     log=lambda *_: None).to_dict()  # fmt: skip
    assert d["rungs"] == pytest.approx([0.08, 0.16, 0.32, 0.64])
    assert d["winner"] == "scalerl/batch=2/seed0"
    stopped = {s["point"]: s for s in d["stopped"]}
    assert set(stopped) == {"scalerl/batch=3/seed0", "scalerl/batch=4/seed0"}
    # each rung trains only the points still running, each up to the rung
    for name, limit in calls:
        point = f"scalerl/{name}/seed0"
        assert point not in stopped or limit <= stopped[point]["at_compute"] + 1e-9
    assert ("batch=2", 0.64) in calls and sum(n == "batch=2" for n, _ in calls) == 4
    assert d["compute_full"] == pytest.approx(3 * 0.64)
    assert d["compute_used"] == pytest.approx(0.64 + sum(s["at_compute"] for s in d["stopped"]))
    assert d["compute_used"] < 0.6 * d["compute_full"]
    on_disk = json.loads((out / "decisions.json").read_text())
    assert on_disk["winner"] == d["winner"] and on_disk["stopped"] == d["stopped"]


def test_a_rerun_trains_nothing_and_decides_the_same(study):
    spec, variants, out = study
    first = run_adaptive(variants, out, spec.adaptive, parallel=1, runner="local", train=fake_train([]),
                         log=lambda *_: None).to_dict()  # fmt: skip
    calls = []
    again = run_adaptive(variants, out, spec.adaptive, parallel=1, runner="local", train=fake_train(calls),
                         log=lambda *_: None).to_dict()  # fmt: skip
    assert calls == [] and again["winner"] == first["winner"] and again["stopped"] == first["stopped"]


def test_the_report_shows_the_decisions(study, cli_here):
    spec, variants, out = study
    run_adaptive(variants, out, spec.adaptive, parallel=1, runner="local", train=fake_train([]), log=lambda *_: None)
    done = cli_here("report", str(out))
    assert done.returncode == 0, done.stderr
    md = (out / "study.md").read_text()
    assert "Adaptive study: judged at 0.64 compute per point" in md and "Winner: scalerl/batch=2/seed0" in md
    assert "**Points stopped early" in md and "decisions.png)" in md and "P(best at the budget)" in md
    assert "**Every rung's decision for every point" in md and "scalerl/batch=3/seed0 stopped: P(best)" in md
    assert f"Its threshold, the default, was {MEASURED}." in md  # the false-stop rate measured on real runs
    # the comparison report an adaptive sweep writes at its end carries the same decisions
    from scalerl.experiments.report import write_report

    write_report({v.label: [v.run_dir] for v in variants}, out)
    report_md = (out / "report.md").read_text()
    assert "**Points stopped early" in report_md and "**Every rung's decision for every point" in report_md


def test_the_help_states_the_default_thresholds_measured_false_stop_rate(cli_here):
    done = cli_here("sweep", "--help")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert f"The default threshold, {THRESHOLD:g}, {MEASURED}." in said and "ended within 0.01 of the best" in said


@pytest.mark.parametrize(
    ("adaptive", "says"),
    [
        ("adaptive:\n  first_rung: 0.1\n", "line 4, 'adaptive': give 'budget'"),
        ("adaptive:\n  budget: 0.1\n  first_rung: 0.2\n", "the first rung (0.2) must be a positive compute no larger than the budget (0.1)"),
        ("adaptive:\n  budget: 0.1\n  threshold: 1.5\n", "threshold: Input should be less than 1"),
        ("adaptive:\n  budget: 0.1\n  eta: 1.0000001\n", "eta: Input should be greater than or equal to 1.5"),
        ("adaptive:\n  budget: .inf\n", "budget: Input should be a finite number"),
        ("adaptive:\n  budget: 1.0\n  first_rung: 1.0e-300\n", "makes 998 rungs to the budget 1, more than 12"),
        ("adaptive:\n  budget: 0.1\n  rungs: 3\n", "'adaptive.rungs': unknown key"),
        ("adaptive:\n  budget: fast\n", "budget must be a number"),
        ("adaptive:\n  budget: 0.1\n  pairing: copula\n", "pairing: 'copula' is not a pairing; choose one of independent, shared-shape"),
    ],
)
def test_a_bad_adaptive_section_is_one_sentence_with_exit_2(tmp_path, cli_here, adaptive, says):
    spec = tmp_path / "spec.yaml"
    spec.write_text("recipes: [scalerl]\nseeds: [0]\nset: {train.steps: 10}\n" + adaptive)
    done = cli_here("sweep", str(spec), "--adaptive", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_adaptive_without_a_budget_is_refused_before_anything_trains(tmp_path, cli_here):
    spec = tmp_path / "spec.yaml"
    spec.write_text("recipes: [scalerl]\nseeds: [0]\nset: {train.steps: 10}\n")
    done = cli_here("sweep", str(spec), "--adaptive", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "--adaptive needs a compute budget per point" in done.stderr
    below = cli_here("sweep", str(spec), "--adaptive", "--budget", "0.1", "--first-rung", "0.5", "--out",
                     str(tmp_path / "out"))  # fmt: skip
    assert below.returncode == 2 and "the first rung (0.5) must be a positive compute no larger than the budget" \
        in below.stderr  # fmt: skip


def test_each_rung_prints_a_line_per_point_and_the_page_sees_the_rung_under_way(study):
    """The lines the console gets are decisions.json's; while a rung trains, decisions.json
    names it and gives no verdict."""
    spec, variants, out = study
    seen, printed = [], []
    train = fake_train([])

    def watching(cfg, run_dir, resume=False, log=print):
        d = json.loads((out / "decisions.json").read_text())
        seen.append((d["done"], d["under_way"]["rung"], d["under_way"]["of"]))
        assert cfg.eval.every_compute == pytest.approx(0.08 / 8)  # the cadence: 8 evaluations by rung 1
        return train(cfg, run_dir, resume, log)

    d = run_adaptive(variants, out, spec.adaptive, parallel=1, runner="local", train=watching,
                     log=printed.append).to_dict()  # fmt: skip
    assert seen and all(done is False and of == 4 for done, _, of in seen)
    assert [r for _, r, _ in seen] == sorted(r for _, r, _ in seen)  # rung by rung
    lines = [x for r in d["rounds"] for x in r["lines"]]
    assert lines and all(x in printed for x in lines)
    assert len(d["rounds"][0]["lines"]) == 3  # every point, at the first rung
    assert sum(" stopped: " in x for x in lines) == len(d["stopped"]) == 2
    assert any(x.startswith("adaptive study: 3 points judged at compute 0.64 each") and "eval.every_compute" in x
               for x in printed)  # fmt: skip
    assert d["done"] is True and d["under_way"] is None
    md_lines = json.loads((out / "decisions.json").read_text())["rounds"]
    assert [x for r in md_lines for x in r["lines"]] == lines


def test_a_point_whose_own_cadence_cannot_decide_a_rung_is_refused_in_one_sentence(study):
    from scalerl.config import ConfigError
    from scalerl.experiments.adaptive import cadence, with_cadence

    spec, variants, _ = study
    every = cadence(spec.adaptive)
    assert every == pytest.approx(0.01)
    v = variants[0]
    assert with_cadence(v.config, every, "p").eval.every_compute == pytest.approx(0.01)
    finer = v.config.model_copy(update={"eval": v.config.eval.model_copy(update={"every_compute": 0.005})})
    assert with_cadence(finer, every, "p").eval.every_compute == pytest.approx(0.005)  # finer is kept
    coarse = v.config.model_copy(update={"eval": v.config.eval.model_copy(update={"every_compute": 0.05})})
    with pytest.raises(ConfigError, match=r"^point p: eval.every_compute = 0.05 gives its first rung fewer than 8 "
                                          r"evaluations; set it to 0.01 or less, or leave it unset$"):  # fmt: skip
        with_cadence(coarse, every, "p")


def test_each_points_forecast_at_a_rung_is_plans_on_its_folder_prior_included(study, tmp_path):
    """A point whose config names finished runs (``forecast.prior_runs``) is ranked under their
    prior, as ``plan`` on its folder forecasts it: the band a rung's decision records for it is
    ``plan``'s at the budget, cut at the rung, to 1e-9 (one set of draws)."""
    from scalerl.cli import main
    from scalerl.fit.choose import through
    from scalerl.fit.forecast import read_logs

    spec, variants, out = study
    done = tmp_path / "done"
    rng = np.random.default_rng(7)
    for i in range(6):  # finished runs of the points' shape: A 0.3-0.8, B 1.5, C_mid 0.2
        run = done / f"r{i}"
        run.mkdir(parents=True)
        a, mid = rng.uniform(0.3, 0.8), rng.uniform(0.15, 0.25)
        rows = [{"step": k, COMPUTE: STEP * (k + 1),
                 VAL_PASS_RATE: float(np.clip(law.sigmoid(STEP * (k + 1), a, 1.5, mid, 0.0) + rng.normal(0, 0.01),
                                              0.0, 1.0))}
                for k in range(64)]  # fmt: skip
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    inner = fake_train([])

    def train(cfg, run_dir, resume=False, log=print):
        inner(cfg, run_dir, resume, log)
        (run_dir / "config.yaml").write_text(f"forecast:\n  prior_runs: {done}\n")

    d = run_adaptive(variants, out, spec.adaptive, parallel=1, runner="local", train=train,
                     log=lambda *_: None).to_dict()  # fmt: skip
    second = d["rounds"][1]
    rung = second["at_compute"]
    for point, got in second["forecasts"].items():
        folder = out / point
        (log,) = read_logs([folder])
        cut = float(through(log.curve, rung).compute[-1])
        path = tmp_path / "plan.json"
        assert main(["plan", str(folder), "--target", "0.5", "--max-compute", repr(cut), "--budget-compute",
                     repr(spec.adaptive.budget), "--json", str(path)]) == 0  # fmt: skip
        plan = json.loads(path.read_text())
        assert plan["forecast"]["method"] == "prior"
        at = plan["at_budget"]
        assert [got["median"], got["lo"], got["hi"]] == pytest.approx([at["value"], at["lo"], at["hi"]], abs=1e-9)
