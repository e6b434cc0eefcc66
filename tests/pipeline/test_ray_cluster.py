"""``pipeline.backend=ray`` across nodes: a two-node cluster on this machine (Ray's own
``ray.cluster_utils.Cluster``: a head node and a second node, one CPU each).

The plan puts the generator on the second node (the driver's node keeps its cores for the
learner) and ``plan.json`` says where it ran; losing that node mid-run stops the run with one
sentence naming it, and the newest checkpoint resumes on the one node left; a plan the
cluster cannot serve is one sentence at start. A random-init nano model, a few steps.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from scalerl.config import ConfigError, load_config  # noqa: E402
from scalerl.pipeline.plan import build_plan  # noqa: E402
from scalerl.pipeline.restarts import checkpoint_step  # noqa: E402
from scalerl.pipeline.run import train  # noqa: E402
from scalerl.runfolder import read_records  # noqa: E402

# serial: these tests start Ray clusters
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def cluster():
    """A head node with one CPU; this process is a driver on it."""
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    ray.init(address=made.address, logging_level=logging.WARNING,
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    yield made
    ray.shutdown()
    made.shutdown()


def _second(made):
    """The cluster's one other node (one CPU), added if a test before removed it."""
    if not made.worker_nodes:
        made.add_node(num_cpus=1)
        made.wait_for_nodes()
    [node] = made.worker_nodes
    return node


def _sets(model_dir, **extra) -> list[str]:
    """A training set of 1000 problems, not the task's default 100 000: ``scalerl train``'s
    preflight renders every prompt of it (~7 s per run on 2 cores for 100 000)."""
    base = {"model.base": str(model_dir), "task.knobs": "{min_digits: 1, max_digits: 2, num_train: 1000}",
            "pipeline.backend": "ray", "pipeline.mode": "pipeline-rl",
            "pipeline.k": 1, "pipeline.num_generators": 1, "pipeline.prompts_per_step": 2,
            "pipeline.generations": 2, "pipeline.prompts_per_chunk": 1, "sampling.max_new_tokens": 12,
            "length.control": "none", "length.truncation": "keep", "filters.zero_variance": False,
            "train.steps": 2, "train.max_minutes": "null", "eval.every": 100, "eval.schedule": "every", "eval.num_prompts": 2,
            "eval.k": 1, "log.progress": False, "log.tensorboard": False, "train.checkpoint_every": 1}
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def _plan_json(run) -> dict:
    return json.loads((run / "plan.json").read_text())


def test_the_generator_runs_on_the_second_node_and_plan_json_says_so(cluster, nano_dir, tmp_path):
    second = _second(cluster)
    head = ray.get_runtime_context().get_node_id()
    assert second.node_id != head
    train(load_config("scalerl", _sets(nano_dir)), tmp_path / "run", log=lambda *_: None)
    assert [r["step"] for r in read_records(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2]
    saved = _plan_json(tmp_path / "run")
    assert saved["plan"]["generator_nodes"] == [second.node_id]
    assert [n["id"] for n in saved["plan"]["nodes"] if n["driver"]] == [head]
    [generator] = saved["ran"]["generators"]
    assert generator["node"] == second.node_id and generator["pid"] != os.getpid()
    assert saved["ran"]["learner"][0]["node"] == head and saved["ran"]["learner"][0]["pid"] == os.getpid()
    # more than the cluster holds is one sentence, before anything runs
    with pytest.raises(ConfigError, match=r"have 2 CPU\(s\) but the run plan needs 3 .*: 1 CPU\(s\) missing"):
        build_plan(load_config("scalerl", _sets(nano_dir, **{"pipeline.num_generators": 3})))


def _cli(run, sets: list[str], address: str, resume: bool = False) -> subprocess.Popen:
    where = ["--resume", str(run)] if resume else ["--recipe", "scalerl", "--out", str(run)]
    return subprocess.Popen([sys.executable, "-m", "scalerl", "train", *where, *(a for s in sets for a in ("--set", s)),
                             "--no-fit"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"RAY_ADDRESS": address})


def test_losing_the_second_node_stops_the_run_naming_it_and_the_checkpoint_resumes_on_one_node(
        cluster, nano_dir, tmp_path):
    made, second = cluster, _second(cluster)
    run = tmp_path / "run"
    # steps the run cannot finish before the node goes: only the node's loss ends it
    proc = _cli(run, _sets(nano_dir, **{"train.steps": 100_000}), made.address)
    try:
        while checkpoint_step(run) is None and proc.poll() is None:  # the first checkpoint exists
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1]
        assert _plan_json(run)["plan"]["generator_nodes"] == [second.node_id]
        made.remove_node(second)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"scalerl train: Ray node {second.node_id} (") and "left the cluster with generator 0" in last
    assert last.endswith(f"continue with `scalerl train --resume {run}`."), last
    assert "Traceback (most recent call last)" not in err, err

    step = checkpoint_step(run)
    resumed = _cli(run, [f"train.steps={step + 1}"], made.address, resume=True)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert read_records(run / "metrics.jsonl")[-1]["step"] == step + 1
    head = [n["id"] for n in _plan_json(run)["plan"]["nodes"] if n["driver"]]
    saved = _plan_json(run)
    assert [n["id"] for n in saved["plan"]["nodes"]] == head  # one node left
    assert saved["plan"]["generator_nodes"] == head and saved["ran"]["generators"][0]["node"] == head[0]
