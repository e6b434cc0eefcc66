"""``rollout.engine=vllm`` through the real pipeline on the real vLLM 0.32 engine (CPU build).

Each run's generators are spawned processes that each start a vLLM engine; the trainer
recomputes every token's log-prob, so ``mismatch_*`` measures the engine against the trainer:
in sync mode every token is sampled wholly by the weights the trainer just published, and in
PipelineRL mode the fresh tokens (sampled wholly under the learner's version, weights and KV)
agree with it, whatever else a swap left stale.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from numerics import fp32_kl_bound, fp32_logprob_bound

from scalerl.config import load_config
from scalerl.pipeline.run import train
from scalerl.runfolder import read_records

pytestmark = pytest.mark.serial  # each run starts vLLM engines in generator processes
SEQ = 128  # longer than any prompt and completion here: the attention sums' length in the bound

VLLM_SMALL = ["rollout.engine=vllm", "rollout.vllm.kv_cache_memory_bytes=67108864", "rollout.vllm.enforce_eager=true",
              "rollout.vllm.extra={max_model_len: 256}"]
"""A test engine: 64 MiB of KV (vLLM's CPU default is 40% of the machine's memory), no compile."""


def _config(model_dir, *extra):
    return load_config("scalerl", [
        f"model.base={model_dir}", *VLLM_SMALL, "pipeline.backend=local", "pipeline.prompts_per_step=4",
        "pipeline.generations=4", "pipeline.prompts_per_chunk=1", "filters.zero_variance=false", "optim.lr=1e-3",
        "train.steps=3", "eval.every=100", "eval.schedule=every", "eval.num_prompts=2", "log.progress=false", "log.tensorboard=false",
        "train.checkpoint_every=100", *extra])


def _run(cfg, out, resume=False):
    last = train(cfg, out, log=lambda *_: None, resume=resume)
    return last, read_records(out / "metrics.jsonl")


@pytest.mark.numerics  # its bound every step, once more on another instruction set (the others: the same bound)
def test_a_sync_run_samples_every_step_with_the_weights_the_trainer_just_published(warm_model_dir, tmp_path):
    # the versions reach the engines through the collective transport (the pipeline-rl run below: shm)
    last, records = _run(_config(warm_model_dir, "pipeline.mode=sync", "sampling.max_new_tokens=40",
                                 "pipeline.weight_transport=collective",
                                 "length.control=none", "eval.every=2", "eval.schedule=every"), tmp_path / "run")
    trained = [r for r in records if "grad_norm" in r]
    assert last["step"] == 3 and last["version"] == 3 and len(trained) == 3
    # the weights do move (lr 1e-3 on a warm model): an engine that kept its old weights, or
    # loaded them under the wrong version, would disagree with the trainer from step 2 on
    assert any(r["grad_norm"] > 0 for r in trained[:-1])
    assert all(r["mismatch_fresh_frac"] == 1.0 and r["staleness_max"] == 0 for r in trained)
    # two float32 implementations agree within the rounding bound of this model's arithmetic
    assert all(r["mismatch_tokens"] > 0 and r["mismatch_kl"] <= fp32_kl_bound(warm_model_dir, SEQ) for r in trained)
    assert all(r["mismatch_logp_abs_max"] < fp32_logprob_bound(warm_model_dir, SEQ) for r in trained)
    # evaluations ran on a vLLM generator (eval.on=auto with the local backend)
    assert [r["step"] for r in records if "val_pass_rate" in r] == [0, 2, 3]


def test_a_pipeline_run_keeps_fresh_tokens_exact_within_the_lag_bound(warm_model_dir, tmp_path):
    k = 2
    overrides = ["pipeline.mode=pipeline-rl", f"pipeline.k={k}", "sampling.max_new_tokens=56",
                 "length.control=interrupt", "length.interrupt_range=[20,28]", "length.answer_budget=16"]
    last, records = _run(_config(warm_model_dir, *overrides, "train.steps=4"), tmp_path / "run")
    trained = [r for r in records if "grad_norm" in r]
    assert last["step"] == 4 and last["version"] == 4
    assert all(r["step_trained_tokens"] > 0 for r in trained) and any(r["grad_norm"] > 0 for r in trained)
    assert all(0 <= r["staleness_max"] <= k for r in trained)  # versions stamped per token
    # tokens sampled wholly (weights and KV) by the trainer's version agree with it; which
    # tokens are fresh depends on timing, so only those present are checked
    fresh = [r for r in trained if r["mismatch_fresh_frac"] > 0]
    kl, logp = fp32_kl_bound(warm_model_dir, SEQ), fp32_logprob_bound(warm_model_dir, SEQ)
    assert fresh and all(r["mismatch_fresh_kl"] <= kl and r["mismatch_fresh_logp_abs_max"] < logp for r in fresh)
    # the warm model often thinks past 20-28 tokens: the engine interrupts it, and it answers in a second phase
    assert max(r["interrupted_rate"] for r in trained) > 0
    # a vLLM run's resume: tests/pipeline/test_ray_backend.py (vLLM generators on Ray)


def test_a_lora_run_samples_with_the_merged_adapters(warm_model_dir, tmp_path):
    """LoRA publishes adapters; each generator merges them into its base and vLLM loads only
    the targeted projections (completed to whole layers by the engine)."""
    last, records = _run(_config(warm_model_dir, "pipeline.mode=sync", "sampling.max_new_tokens=40",
                                 "length.control=none", "model.lora={rank: 4, targets: [q_proj, v_proj]}",
                                 "optim.lr=1e-2", "train.steps=3"), tmp_path / "run")
    trained = [r for r in records if "grad_norm" in r]
    assert last["version"] == 3 and any(r["grad_norm"] > 0 for r in trained[:-1])  # the adapters moved
    assert all(r["mismatch_tokens"] > 0 and r["mismatch_logp_abs_max"] < fp32_logprob_bound(warm_model_dir, SEQ)
               for r in trained)  # fmt: skip


def test_the_config_s_vllm_options_reach_vllm_llm(nano_dir):
    from scalerl.pipeline.build import actor_spec
    from scalerl.pipeline.generators.actor import build_engine
    from scalerl.pipeline.plan import build_plan

    cfg = load_config("scalerl", [f"model.base={nano_dir}", *VLLM_SMALL[:-1], "rollout.vllm.gpu_memory_utilization=0.3",
                                  "rollout.vllm.extra={max_model_len: 128}"])
    engine, _ = build_engine(actor_spec(cfg, build_plan(cfg), nano_dir, seed=0))
    vllm_config = engine.llm.llm_engine.vllm_config
    assert vllm_config.cache_config.gpu_memory_utilization == 0.3
    assert vllm_config.cache_config.kv_cache_memory_bytes == 64 << 20
    assert vllm_config.model_config.max_model_len == 128 and vllm_config.model_config.enforce_eager


def test_choosing_vllm_without_vllm_is_one_sentence(tmp_path):
    hide = "import sys; sys.modules['vllm'] = None; from scalerl.cli import main; sys.exit(main())"
    run = subprocess.run([sys.executable, "-c", hide, "train", "--set", "rollout.engine=vllm", "--out",
                          str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert "needs vLLM, which is not installed" in run.stderr and "scalerl[vllm]" in run.stderr
