"""The ``collective`` weight transport (``pipeline.collective``) on gloo: each generator's two-rank
group with the learner, received in a thread while the engine decodes. What is asserted is what
arrived, never how fast, nor how a race between a send and a read came out."""

from __future__ import annotations

import json
import multiprocessing as std_mp

import pytest
import torch
from numerics import fp32_logprob_bound
from pipeline_helpers import run_overrides

from scalerl.config import load_config
from scalerl.models import build_model, build_task_tokenizer
from scalerl.pipeline.collective import CollectiveWeights, SyncFailed
from scalerl.pipeline.run import train
from scalerl.pipeline.weights import WeightLayout, model_buckets
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.runfolder import PLACEMENT, read_records

TOKENIZER = build_task_tokenizer()


def _model(seed: int = 0):
    return build_model("nano", len(TOKENIZER), seed=seed, tokenizer=TOKENIZER)


def _sink(model, bucket_bytes: int = 64 << 10, timeout_s: float = 60.0) -> CollectiveWeights:
    # small buckets: a version crosses in many sends, as a big model's does
    return CollectiveWeights(WeightLayout(model), bucket_bytes=bucket_bytes, timeout_s=timeout_s)


def _wait_for(source, version: int):
    """The source's read once ``version`` has arrived whole (the receiver thread gets it)."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = source.read(version - 1)
        if got is not None and got[0] >= version:
            return got
        time.sleep(0.01)
    raise AssertionError(f"version {version} never arrived")


def test_a_version_arrives_bit_exact_in_the_torch_engine():
    learner, other = _model(0), _model(1)
    sink = _sink(learner)
    source = sink.handle(0).source()  # joins in this process: the learner's side joins in its thread
    sink.write(1, model_buckets(learner))
    version, state = _wait_for(source, 1)
    engine = TorchEngine(other, TOKENIZER, eos_token_ids=())
    engine.update_weights(state, version)
    assert engine.version == 1
    theirs, ours = dict(other.named_parameters()), dict(learner.named_parameters())
    assert set(theirs) == set(ours)
    assert all(torch.equal(theirs[n], ours[n]) for n in ours)  # every bit, not close
    sink.close()


def test_a_reader_that_reads_nothing_never_holds_the_learner_and_gets_the_newest():
    """Three versions written while the generator reads none (idle, or mid-chunk): every write
    returns, and the next read is the third, whole. The one lent to the engine is never written."""
    models = [_model(s) for s in range(4)]
    sink = _sink(models[0])
    source = sink.handle(0).source()
    sink.write(0, model_buckets(models[0]))
    version, lent = _wait_for(source, 0)
    kept = {n: t.clone() for n, t in lent.items()}
    for v in (1, 2, 3):
        sink.write(v, model_buckets(models[v]))
    version, state = _wait_for(source, 3)
    assert version == 3 and all(torch.equal(state[n], p) for n, p in models[3].named_parameters())
    # the buffer lent at version 0 stayed as it was until the next read lent another
    assert all(torch.equal(lent[n], kept[n]) for n in kept)
    sink.close()


def test_a_replacement_is_sent_the_newest_version_as_it_joins_and_a_dead_one_is_dropped():
    learner = _model(0)
    sink = _sink(learner)
    ctx = std_mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_receive_once_and_die, args=(sink.handle(0), child))
    proc.start()
    sink.write(1, model_buckets(learner))
    assert parent.recv() == 1  # the child had version 1, then exited without a word
    proc.join(30)
    sink.write(2, model_buckets(learner))  # its peer is gone: this send fails, the write does not
    sink.drop(0)
    replacement = sink.handle(0).source()  # joins after version 2: it is sent version 2 first
    assert _wait_for(replacement, 2)[0] == 2
    sink.close()


def _receive_once_and_die(handle, conn) -> None:
    source = handle.source()
    conn.send(_wait_for(source, 1)[0])
    import os

    os._exit(0)


def test_a_live_generator_that_takes_nothing_stops_the_sync_with_one_sentence_naming_it():
    """A peer that joined and never receives: the send runs out of ``learner.sync_timeout_s``."""
    import datetime

    import torch.distributed as dist

    learner = build_model("small", len(TOKENIZER), seed=0)  # ~45 MB: more than a socket buffers
    sink = _sink(learner, bucket_bytes=64 << 20, timeout_s=3.0)
    endpoint = sink.handle(0).endpoint
    store = dist.TCPStore(endpoint.host, endpoint.port, is_master=False, timeout=datetime.timedelta(seconds=30))
    silent = dist.ProcessGroupGloo(dist.PrefixStore(endpoint.prefix, store), 1, 2, datetime.timedelta(seconds=30))
    import time

    deadline = time.monotonic() + 30
    while not sink.connected() and time.monotonic() < deadline:  # the learner's side of the group is up
        time.sleep(0.01)
    with pytest.raises(SyncFailed, match=r"^the weight sync to generator 0 took longer than learner.sync_timeout_s=3s"):
        sink.write(1, model_buckets(learner))
    del silent


def test_a_pipeline_run_on_the_collective_transport_samples_fresh_tokens_with_the_learners_weights(
        warm_model_dir, tmp_path):
    """The whole pipeline (local backend, torch engine) on ``pipeline.weight_transport=collective``:
    the plan names it, and every fresh token (sampled wholly by the learner's version) agrees with
    the learner within the float32 bound, which a generator left on old or torn weights would break."""
    cfg = load_config("scalerl", run_overrides(
        warm_model_dir, **{"pipeline.backend": "local", "pipeline.weight_transport": "collective", "pipeline.k": 1,
                           "train.steps": 4, "optim.lr": 1e-3, "eval.every": 100, "eval.num_prompts": 2, "eval.k": 1,
                           "pipeline.prompts_per_step": 4, "pipeline.generations": 4, "pipeline.prompts_per_chunk": 2,
                           "filters.zero_variance": "false"}))
    train(cfg, tmp_path)
    assert json.loads((tmp_path / PLACEMENT).read_text())["plan"]["weights"] == "collective"
    trained = [r for r in read_records(tmp_path / "metrics.jsonl") if "grad_norm" in r]
    assert len(trained) == 4 and all(r["staleness_max"] <= 1 for r in trained)
    fresh = [r for r in trained if r["mismatch_fresh_frac"] > 0]  # which are fresh depends on timing
    bound = fp32_logprob_bound(warm_model_dir, 128)
    assert fresh and all(r["mismatch_fresh_logp_abs_max"] < bound for r in fresh)
