"""Evaluation off the learner's critical path: records stay in step order and carry the same
numbers as an inline evaluation; a generator evaluates the snapshot it was sent."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from pipeline_helpers import run_overrides

from scalerl.compute import ComputeMeter
from scalerl.config import ConfigError, load_config
from scalerl.pipeline import build
from scalerl.pipeline.evaluation import GeneratorEvaluation, LearnerEvaluation, OrderedRecords
from scalerl.pipeline.plan import build_plan
from scalerl.pipeline.run import train
from scalerl.pipeline.weights import WeightLayout, model_buckets
from scalerl.runfolder import read_records
from scalerl.types import EvalResult


class _Late:
    """An evaluation whose results arrive when the test says so, in any order."""

    def __init__(self) -> None:
        self.submitted, self.out = [], []

    def submit(self, step, version, model):
        self.submitted.append(step)

    def results(self, timeout=0.0):
        out, self.out = self.out, []
        return out

    def deliver(self, step, value, tokens):
        self.out.append(EvalResult(step, step, {"val_pass_rate": value}, tokens, 1.5, 123))


def _record(meter: ComputeMeter, step: int) -> dict:
    return {"step": step, **meter.snapshot()}


def test_records_are_released_in_step_order_with_their_evaluation_tokens_counted():
    meter, late = ComputeMeter(2, n_params=10), _Late()
    records = OrderedRecords(late, meter)
    records.add(_record(meter, 0), evaluate=True)
    records.add(_record(meter, 1))
    assert records.ready() == [] and records.pending == 1  # step 0 waits for its evaluation
    records.add(_record(meter, 2), evaluate=True)
    records.add(_record(meter, 3))
    late.deliver(2, 0.4, tokens=7)  # the later evaluation comes back first
    assert records.ready() == []
    late.deliver(0, 0.1, tokens=5)
    out = records.ready()
    assert [r["step"] for r in out] == [0, 1, 2, 3] and records.pending == 0
    assert [r.get("val_pass_rate") for r in out] == [0.1, None, 0.4, None]
    # tokens of the evaluation of step s count from step s on: 5 from step 0, 5 + 7 from step 2
    assert [r["total_gen_tokens"] for r in out] == [5, 5, 12, 12]
    assert [r["flops"] for r in out] == [2 * 10 * t for t in (5, 5, 12, 12)]
    assert meter.gen_tokens == 12 and out[0]["eval_s"] == 1.5 and "learner_eval_s" in out[0]


def test_a_checkpoint_s_held_records_under_the_old_metric_names_are_renamed_and_counted():
    meter, late = ComputeMeter(2, n_params=10), _Late()
    late.resubmit = lambda step, version, weights: late.submitted.append(step)
    records = OrderedRecords(late, meter)
    old = {"step": 4, "compute_gpu_hours": 0.1, "flops": 0.0, "wall_s": 1.0, "gen_tokens": 30, "train_tokens": 8,
           "trained_tokens": 8}  # written before the rename
    records.load_state_dict({"held": [old], "evaluations": [(4, 4, None)]})
    late.deliver(4, 0.3, tokens=5)
    [out] = records.ready()
    assert out["total_gen_tokens"] == 35 and out["total_trained_tokens"] == 8 and out["step_trained_tokens"] == 8
    assert not {"gen_tokens", "train_tokens", "trained_tokens"} & set(out)


def test_drain_waits_for_every_outstanding_evaluation_and_keeps_the_traffic_moving():
    meter, late = ComputeMeter(2, n_params=1), _Late()
    records = OrderedRecords(late, meter)
    records.add(_record(meter, 0), evaluate=True)
    records.add(_record(meter, 1), evaluate=True)
    pumped = []

    def pump():  # the results turn up only after the driver has pumped twice
        pumped.append(1)
        if len(pumped) == 2:
            late.deliver(1, 0.3, 1)
            late.deliver(0, 0.2, 1)

    assert [r["step"] for r in records.drain(pump)] == [0, 1] and len(pumped) == 2


def test_a_generator_evaluates_the_snapshot_it_was_sent_as_the_learner_would(warm_model_dir):
    from scalerl.models import load_pretrained
    from scalerl.pipeline.generators.local import LocalBackend

    cfg = load_config("scalerl", run_overrides(warm_model_dir, **{"eval.num_prompts": 8, "eval.k": 2}))
    model, tokenizer = load_pretrained(warm_model_dir)
    plan = build_plan(cfg)
    assert plan.eval_on == "generator" and plan.generators == 1  # auto on local, 2 cores (train.cores)
    backend = LocalBackend(build.actor_spec(cfg, plan, warm_model_dir, seed=0), WeightLayout(model), plan)

    def publish(version):  # the driver's path: the learner writes the sink, the backend announces
        backend.announce(version, backend.sink.write(version, model_buckets(model)))

    try:
        publish(0)
        remote = GeneratorEvaluation(backend)
        remote.submit(0, 0, model)
        with torch.no_grad():  # the snapshot was taken at submit: later changes do not leak in
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        publish(1)
        results, deadline = [], time.monotonic() + 300
        while not results and time.monotonic() < deadline:
            results = remote.results(timeout=1.0)
            backend.collect(timeout=0.0)  # raises a generator's failure instead of hanging
    finally:
        backend.close()
    model.load_state_dict(load_pretrained(warm_model_dir)[0].state_dict())  # back to version 0
    local = LearnerEvaluation(build.evaluators(cfg, model, tokenizer))
    local.submit(0, 0, model)
    [here] = local.results()
    [there] = results
    assert there.pid != os.getpid() and here.pid == os.getpid()
    assert (there.step, there.version) == (0, 0)
    assert there.metrics == here.metrics and there.tokens == here.tokens  # same weights, same seed


def test_a_run_evaluating_on_the_generator_logs_what_an_inline_one_does(warm_model_dir, tmp_path):
    common = {"pipeline.backend": "local", "pipeline.num_generators": 1, "train.steps": 6, "eval.every": 3, "eval.schedule": "every",
              "train.checkpoint_every": 3, "eval.num_prompts": 16,
              "eval.k": 2, "pipeline.prompts_per_step": 2, "pipeline.generations": 4}
    for where in ("generator", "learner"):
        train(load_config("scalerl", run_overrides(warm_model_dir, **common, **{"eval.on": where})), tmp_path / where)
    remote, inline = (read_records(tmp_path / w / "metrics.jsonl") for w in ("generator", "learner"))
    assert [r["step"] for r in remote] == list(range(7))
    assert [r["step"] for r in remote if "val_pass_rate" in r] == [0, 3, 6]
    # step 0 evaluates the same weights with the same seed either way
    assert remote[0]["val_pass_rate"] == inline[0]["val_pass_rate"]
    assert all(r["val_stderr"] > 0 and r["eval_s"] > 0 for r in remote if "val_pass_rate" in r)
    # the role times of every step are in the log (bounds only: the machine may be busy)
    for r in remote[1:]:
        assert r["publish_s"] >= 0 and r["generator_stall_s"] >= 0 and r["generator_swap_s"] >= 0
        assert r["generator_idle_s"] >= 0 and r["group_transit_s"] >= 0 and r["generator_cpu_s"] > 0
        assert r["generator_eval_cpu_s"] >= 0
    # the first chunk after the step-0 evaluation carries the generator's evaluation CPU
    assert sum(r["generator_eval_cpu_s"] for r in remote[1:]) > 0
    flops = [r["flops"] for r in remote]
    assert flops == sorted(flops)
    # what an evaluation cost the learner and took on its role, at every evaluation; inline
    # the learner's part holds the whole evaluation (nested timers: no race decides it).
    # How much the generator placement saves is a measurement: bench/eval_placement.py
    assert all(r["learner_eval_s"] >= 0 for r in remote if "eval_s" in r)
    assert all(r["learner_eval_s"] >= r["eval_s"] for r in inline if "eval_s" in r)
    # a checkpoint on an evaluation step waits for nothing: it is written once the log has
    # reached its step, and the last one is the last step's
    # (whether step 3's was written before step 6's superseded it depends on when that
    # evaluation came back: only what holds either way is asserted)
    run = tmp_path / "generator"
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["step"] == 6
    if (run / "checkpoint.old").exists():
        assert json.loads((run / "checkpoint.old" / "meta.json").read_text())["step"] == 3


def test_eval_on_generator_needs_a_backend_whose_generators_evaluate():
    cfg = load_config("scalerl", ["eval.on=generator", "pipeline.backend=inprocess"])
    with pytest.raises(ConfigError, match="eval.on=generator needs a backend whose generators evaluate, and "
                                          "pipeline.backend=inprocess's do not"):
        build_plan(cfg)
    assert build_plan(load_config("scalerl", ["pipeline.backend=inprocess"])).eval_on == "learner"  # auto


def test_a_stop_drains_only_until_its_deadline_and_keeps_the_rest_held():
    meter, late = ComputeMeter(2, n_params=1), _Late()
    records = OrderedRecords(late, meter)
    records.add(_record(meter, 0), evaluate=True)  # never delivered: a hung evaluation
    records.add(_record(meter, 1))
    assert records.drain(lambda: None, until=time.monotonic()) == []
    assert records.pending == 1 and [r["step"] for r in records.held] == [0, 1]  # the checkpoint keeps them


def test_a_stop_during_a_learner_evaluation_leaves_its_record_without_metrics():
    from scalerl.rollout.trajectory import RolloutStopped

    class Stopped:
        prefix = "val"

        def __call__(self, stop=None):
            assert stop is not None and stop()
            raise RolloutStopped("a stop was requested")

    said = []
    evaluation = LearnerEvaluation([Stopped()], stop=lambda: True, log=said.append)
    records = OrderedRecords(evaluation, ComputeMeter(2, n_params=1))
    records.add(_record(records.compute, 3), evaluate=True, model=None, version=3)
    [record] = records.ready()
    assert record["step"] == 3 and "val_pass_rate" not in record and len(said) == 1
