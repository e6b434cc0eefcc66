"""The run plan (``scalerl.pipeline.plan``): one frozen value says where every role runs;
the backends declare what they can do, and the plan reads that, never a backend's name."""

from __future__ import annotations

import json
import pickle

import pytest

from scalerl.config import ConfigError, load_config
from scalerl.pipeline.backends import BACKENDS, Backend, EvaluatingBackend, backend_class
from scalerl.pipeline.plan import Node, build_plan, gpus_per_generator, place_on_nodes


def _plan(*sets: str, nodes=None):
    return build_plan(load_config("scalerl", ["train.cores=4", *sets]), nodes=nodes)


def test_local_and_inprocess_plans_split_this_machine_and_survive_json_and_pickle():
    local = _plan()
    assert (local.generators, local.generator_threads, local.learner_threads) == (2, 1, 2)
    assert (local.eval_on, local.weights, local.rank_transport, local.device) == ("generator", "shm", "driver",
                                                                                  "cpu")
    assert local.devices == 4 and not local.generators_in_learner and local.nodes == ()
    one = _plan("pipeline.backend=inprocess")
    # generators in the learner's process: it takes every core, evaluates itself, counts 4 cores
    assert (one.learner_threads, one.eval_on, one.devices, one.generators_in_learner) == (4, "learner", 4, True)
    ranks = _plan("learner.world_size=2", "pipeline.backend=inprocess")
    assert (ranks.rank_threads, ranks.rank_transport, ranks.devices) == (2, "processes", 4)  # split, not added
    assert pickle.loads(pickle.dumps(local)) == local
    assert json.loads(json.dumps(local.to_dict()))["rule"] == local.rule
    assert any("evaluation on the generator, weights through shared memory" in line for line in local.lines())


def test_gpus_are_planned_once_from_the_visible_devices(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    plan = _plan("pipeline.num_generators=3")
    assert (plan.device, plan.learner_gpus, plan.generator_gpus, plan.devices) == ("cuda", (0,), (1, 2, 3), 4)
    assert plan.accelerated and plan.generator_device == "cuda"
    shared = _plan("pipeline.num_generators=2", "learner.world_size=2", "pipeline.prompts_per_step=8")
    assert (shared.learner_gpus, shared.generator_gpus, shared.devices) == ((0, 1), (2, 3), 4)


def test_the_plan_chooses_the_fastest_weight_transport_the_placement_allows(monkeypatch):
    """``pipeline.weight_transport=auto``: shared memory on CPUs, a collective group where each
    generator has a GPU of its own, CUDA IPC where they share the learner's; a choice that the
    backend or the placement cannot do is one sentence."""
    import torch

    assert _plan().weights == "shm" and _plan("pipeline.weight_transport=collective").weights == "collective"
    assert _plan("pipeline.backend=inprocess").weights == "in_process"
    with pytest.raises(ConfigError, match="pipeline.weight_transport=collective is not one pipeline.backend=inprocess "
                                          "can use; it moves weights through a copy in this process"):
        _plan("pipeline.backend=inprocess", "pipeline.weight_transport=collective")
    with pytest.raises(ConfigError, match="cuda_ipc needs every generator on a GPU the learner holds"):
        _plan("pipeline.weight_transport=cuda_ipc")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    own = _plan("pipeline.num_generators=3")
    assert own.weights == "collective" and json.loads(json.dumps(own.to_dict()))["weights"] == "collective"
    assert any("weights through a torch.distributed group per generator" in line for line in own.lines())
    assert _plan("pipeline.num_generators=3", "learner.world_size=2", "pipeline.prompts_per_step=8").weights == "shm"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    one = _plan("pipeline.num_generators=1")
    assert one.generator_gpus == one.learner_gpus == (0,) and one.weights == "cuda_ipc"
    with pytest.raises(ConfigError, match="NCCL cannot join one GPU twice"):
        _plan("pipeline.num_generators=1", "pipeline.weight_transport=collective")


@pytest.mark.parametrize(("gpus", "generators", "learner", "expected"), [
    (0, 2, 0, 0.0), (4, 2, 0, 1.0), (1, 4, 0, 0.25),
    (4, 3, 1, 1.0),  # the driver's learner keeps one of four: three whole GPUs left
    (2, 2, 1, 0.5),  # one left for two
    (1, 1, 1, 0.0),  # none left: the generator shares the learner's GPU, unreserved
])
def test_gpu_share_per_cluster_generator(gpus, generators, learner, expected):
    assert gpus_per_generator(gpus, generators, learner) == expected


HEAD, W1, W2 = Node("head", "10.0.0.1", 2, 0, True), Node("w1", "10.0.0.2", 2, 0, False), Node("w2", "10.0.0.3", 1, 0, False)


def test_cluster_generators_go_to_the_other_nodes_first_and_ranks_to_the_drivers():
    plan = _plan("pipeline.backend=ray", "pipeline.num_generators=3", nodes=(HEAD, W1, W2))
    assert plan.generator_nodes == ("w1", "w2", "w1") and plan.rank_nodes == ()
    assert plan.eval_on == "learner" and plan.weights == "object_store"
    assert (plan.learner_threads, plan.devices) == (1, 4)  # the learner's thread + three generators' CPUs
    ranks, gens = place_on_nodes((HEAD, W1), ranks=2, rank_cpus=1, rank_gpus=0, generators=2, gen_cpus=1, gen_gpus=0)
    assert ranks == ("head", "head") and gens == ("w1", "w1")
    # one node alone (the cluster lost the others): everything goes to the driver's
    assert _plan("pipeline.backend=ray", nodes=(HEAD,)).generator_nodes == ("head",)
    assert any("nodes: generators on ['10.0.0.2 (w1)" in line for line in plan.lines())


def test_a_cluster_short_of_the_plan_is_one_sentence_naming_what_is_missing():
    with pytest.raises(ConfigError, match=r"the Ray cluster's 2 live node\(s\) have 4 CPU\(s\) but the run plan needs 6 "
                                          r"\(6 generator\(s\) x 1 CPU\(s\)\): 2 CPU\(s\) missing"):
        _plan("pipeline.backend=ray", "pipeline.num_generators=6", nodes=(HEAD, W1))
    with pytest.raises(ConfigError, match=r"1 GPU\(s\) missing"):
        place_on_nodes((HEAD, W1), ranks=1, rank_cpus=1, rank_gpus=1, generators=0, gen_cpus=1, gen_gpus=0)
    # enough CPUs in all, but no node holds a two-thread generator
    with pytest.raises(ConfigError, match=r"no node of the Ray cluster has 2 CPU\(s\) left for generator 1"):
        place_on_nodes((W1, W2, Node("w3", "x", 1, 0, False)), 0, 1, 0, generators=2, gen_cpus=2, gen_gpus=0)
    with pytest.raises(ConfigError, match="a fraction of a GPU .* vLLM needs a whole GPU per generator"):
        _plan("pipeline.backend=ray", "pipeline.num_generators=2", "rollout.engine=vllm",
              nodes=(Node("head", "h", 4, 1, True),))


def test_every_backend_in_the_table_declares_the_whole_contract():
    members = {"layout", "restarts", "sink", "announce", "submit", "collect", "placement", "close"}
    for name in BACKENDS:
        cls = backend_class(name)
        assert members <= set(dir(cls)) | set(cls.__init__.__code__.co_names), name
        assert callable(cls.nodes) and cls.capabilities.generators in ("in_learner", "processes", "cluster")
        if cls.capabilities.evaluates:
            assert {"evaluate", "evaluations"} <= set(dir(cls)), name
    assert {p for p in dir(EvaluatingBackend) if not p.startswith("_")} >= {"evaluate", "evaluations"}
    assert "publish" not in dir(Backend)  # the sink is the one way weights travel
