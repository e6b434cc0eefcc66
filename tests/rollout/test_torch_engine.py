"""TorchEngine: behaviour log-probs equal the trainer's recompute; stopping; top-p; batching."""

import copy
import math

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import LlamaConfig, LlamaForCausalLM

from scalerl.algo.logprobs import token_logprobs
from scalerl.models.diagnostics import mismatch
from scalerl.models.forward import forward_logits
from scalerl.rollout.engine import GenerationEngine
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import SamplingParams

from .tiny import make_model, recompute_logprobs

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [20], [30, 31, 32, 33]]  # ragged: left padding


def _max_gap(model, completions, **kw) -> float:
    return max(
        float((recompute_logprobs(model, c, **kw) - torch.as_tensor(c.logprobs)).abs().max())
        for c in completions
    )


@pytest.mark.parametrize("fast", [True, False])
def test_sampled_logprobs_equal_trainer_recompute(model, tokenizer, fast):
    """(a) fp32, τ = 1, top-p = 1: generator and trainer log-probs agree to 1e-5."""
    engine = TorchEngine(model, tokenizer, fast=fast)
    assert isinstance(engine, GenerationEngine)
    out = engine.generate(PROMPTS, SamplingParams(max_new_tokens=24, seed=3))
    assert [c.prompt_tokens.tolist() for c in out] == PROMPTS
    assert all(c.num_tokens > 0 and len(c.logprobs) == c.num_tokens for c in out)
    assert _max_gap(model, out) < 1e-5


def test_temperature_logprob_is_the_scaled_full_softmax(model, tokenizer):
    out = TorchEngine(model, tokenizer).generate(PROMPTS, SamplingParams(max_new_tokens=16, temperature=0.7, seed=1))
    assert _max_gap(model, out, temperature=0.7) < 1e-5


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_fast_path_equals_plain_path(tokenizer, arch):
    """The lean decode step reproduces the transformers decode step (same tokens, log-probs)."""
    model = make_model(arch=arch)
    params = SamplingParams(max_new_tokens=20, seed=7)
    fast = TorchEngine(model, tokenizer, fast=True).generate(PROMPTS, params)
    plain = TorchEngine(model, tokenizer, fast=False).generate(PROMPTS, params)
    for a, b in zip(fast, plain):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_batched_padded_row_equals_single_sequence_call(model, tokenizer):
    engine = TorchEngine(model, tokenizer)
    params = SamplingParams(max_new_tokens=20, seed=11)
    batch = engine.generate([PROMPTS[2], *PROMPTS[:2]], params)  # row 0 is left-padded by 5
    single = engine.generate([PROMPTS[2]], params)
    np.testing.assert_array_equal(batch[0].tokens, single[0].tokens)
    np.testing.assert_allclose(batch[0].logprobs, single[0].logprobs, atol=1e-5)
    # Same seed, same call -> same samples; a different seed -> different samples.
    again = engine.generate([PROMPTS[2]], params)
    np.testing.assert_array_equal(again[0].tokens, single[0].tokens)
    other = engine.generate([PROMPTS[2]], SamplingParams(max_new_tokens=20, seed=12))
    assert not np.array_equal(other[0].tokens, single[0].tokens)


def test_eos_stops_each_row_at_its_first_eos(tokenizer):
    model = make_model()
    params = SamplingParams(max_new_tokens=24, seed=5)
    free = TorchEngine(model, tokenizer).generate(PROMPTS, params)
    eos = int(free[0].tokens[6])  # declare a token the model does emit to be EOS
    model.generation_config.eos_token_id = eos
    out = TorchEngine(model, tokenizer).generate(PROMPTS, params)
    for f, c in zip(free, out):
        hits = np.flatnonzero(f.tokens == eos)
        if len(hits):  # stops right after the first EOS, tokens before it unchanged
            assert c.finish_reason == "stop" and c.num_tokens == hits[0] + 1
            np.testing.assert_array_equal(c.tokens, f.tokens[: hits[0] + 1])
        else:
            assert c.finish_reason == "length" and c.num_tokens == 24
    assert out[0].num_tokens <= 7
    assert _max_gap(model, out) < 1e-5  # compaction of finished rows keeps the rest exact


def test_multi_token_stop_string_stops_after_the_string(model, tokenizer):
    params = SamplingParams(max_new_tokens=24, seed=5)
    free = TorchEngine(model, tokenizer).generate(PROMPTS, params)
    pair = free[1].tokens[4:6].tolist()
    stop = tokenizer.decode(pair)
    out = TorchEngine(model, tokenizer).generate(PROMPTS, SamplingParams(max_new_tokens=24, seed=5, stop_strings=(stop,)))
    for f, c in zip(free, out):
        ends = [i + 2 for i in range(f.num_tokens - 1) if f.tokens[i : i + 2].tolist() == pair]
        expected = ends[0] if ends else f.num_tokens  # or wherever the free run ended
        assert c.num_tokens == expected
        assert c.finish_reason == ("stop" if ends else f.finish_reason)
    assert out[1].num_tokens <= 6 and out[1].text.endswith(stop)


def test_top_p_samples_only_inside_the_nucleus(model, tokenizer):
    top_p = 0.5
    out = TorchEngine(model, tokenizer).generate(PROMPTS, SamplingParams(max_new_tokens=20, top_p=top_p, seed=2))
    outside = 0
    for c in out:
        ids = torch.as_tensor(np.concatenate([c.prompt_tokens, c.tokens])).unsqueeze(0)
        with torch.no_grad():
            logits, _ = forward_logits(model, ids)
        probs = logits[0, len(c.prompt_tokens) - 1 : -1].softmax(-1)  # (T, V)
        sorted_p, order = probs.sort(-1, descending=True)
        kept = (sorted_p.cumsum(-1) - sorted_p) < top_p  # the nucleus, in sorted order
        rank = (order == torch.as_tensor(c.tokens).unsqueeze(1)).float().argmax(-1)
        outside += int((~kept.gather(1, rank.unsqueeze(1))).sum())
        # The recorded log-prob stays the full-softmax one (what the trainer recomputes).
        full = token_logprobs(logits[:, len(c.prompt_tokens) - 1 : -1], torch.as_tensor(c.tokens)[None])[0]
        np.testing.assert_allclose(c.logprobs, full.numpy(), atol=1e-5)
    assert outside == 0
    # A vanishing nucleus is greedy decoding.
    tiny_p = TorchEngine(model, tokenizer).generate(PROMPTS, SamplingParams(max_new_tokens=12, top_p=1e-6, seed=2))
    greedy = TorchEngine(model, tokenizer).generate(PROMPTS, SamplingParams(max_new_tokens=12, temperature=0.0))
    for a, b in zip(tiny_p, greedy):
        np.testing.assert_array_equal(a.tokens, b.tokens)


def test_full_support_sampling_matches_the_distribution(tokenizer):
    """Many draws of the first token follow softmax(logits) (chi-square-free check on the mode)."""
    model = make_model(vocab_size=64)
    engine = TorchEngine(model, tokenizer)
    out = engine.generate([[5, 6]] * 400, SamplingParams(max_new_tokens=1, seed=0))
    with torch.no_grad():
        logits, _ = forward_logits(model, torch.tensor([[5, 6]]))
    probs = logits[0, -1].softmax(-1)
    counts = np.bincount([int(c.tokens[0]) for c in out], minlength=64) / 400
    assert np.abs(counts - probs.numpy()).max() < 0.08  # 400 draws: sd <= 0.025


@pytest.mark.parametrize(
    "field, value",
    [("max_new_tokens", 0), ("temperature", -1.0), ("top_p", 0.0), ("top_p", 1.5),
     ("answer_budget", -1), ("interrupt_range", (5, 2))],
)
def test_bad_params_are_rejected_naming_the_field(model, tokenizer, field, value):
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        TorchEngine(model, tokenizer).generate(PROMPTS, SamplingParams(**{field: value}))


def test_empty_prompt_is_rejected(model, tokenizer):
    with pytest.raises(ValueError, match="at least one token"):
        TorchEngine(model, tokenizer).generate([[1], []], SamplingParams())


def _swap_at(step_at: int, state: dict, version: int = 1):
    def on_step(engine, step):
        if step == step_at:
            engine.update_weights(state, version)

    return on_step


def test_head_swap_mid_decode_uses_new_weights_and_stamps_later_tokens(tokenizer):
    """(d) Swap only the LM head at step 6: the body (hence the KV cache) is unchanged, so
    tokens 0..5 score exactly under the old weights and tokens 6.. under the new ones."""
    old = make_model(tied=False, seed=0)
    new = make_model(tied=False, seed=0)
    with torch.no_grad():
        new.lm_head.weight.normal_(0.0, 0.3)
    engine = TorchEngine(make_model(tied=False, seed=0), tokenizer)
    params = SamplingParams(max_new_tokens=16, seed=1)
    out = engine.generate(PROMPTS, params, on_step=_swap_at(6, {"lm_head.weight": new.lm_head.weight}))
    assert engine.version == 1
    for c in out:
        assert c.versions.tolist() == [0] * 6 + [1] * (c.num_tokens - 6)
        gap_old = (recompute_logprobs(old, c) - torch.as_tensor(c.logprobs)).abs()
        gap_new = (recompute_logprobs(new, c) - torch.as_tensor(c.logprobs)).abs()
        assert float(gap_old[:6].max()) < 1e-5 and float(gap_new[6:].max()) < 1e-5
        assert float(gap_old[6:].min()) > 1e-3  # the later tokens really changed distribution


@pytest.mark.parametrize("fast", [True, False])
def test_full_swap_keeps_stale_cache_and_changes_later_tokens(tokenizer, fast):
    old, new = make_model(seed=0), make_model(seed=1)
    params = SamplingParams(max_new_tokens=16, seed=2)
    free = TorchEngine(make_model(seed=0), tokenizer, fast=fast).generate(PROMPTS, params)
    engine = TorchEngine(make_model(seed=0), tokenizer, fast=fast)
    out = engine.generate(PROMPTS, params, on_step=_swap_at(5, new.state_dict(), version=7))
    changed = 0
    for f, c in zip(free, out):
        np.testing.assert_array_equal(c.tokens[:5], f.tokens[:5])  # same stream before the swap
        assert c.versions.tolist() == [0] * 5 + [7] * (c.num_tokens - 5)
        gap_old = (recompute_logprobs(old, c) - torch.as_tensor(c.logprobs)).abs()
        assert float(gap_old[:5].max()) < 1e-5
        assert float(gap_old[5:].mean()) > 0.1
        changed += not np.array_equal(c.tokens, f.tokens)
    assert changed > 0
    if fast:  # the lean path handles a mid-decode swap exactly like the transformers path
        plain = TorchEngine(make_model(seed=0), tokenizer, fast=False)
        ref = plain.generate(PROMPTS, params, on_step=_swap_at(5, new.state_dict(), version=7))
        for a, b in zip(out, ref):
            np.testing.assert_array_equal(a.tokens, b.tokens)
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_update_weights_rejects_unknown_keys(model, tokenizer):
    engine = TorchEngine(model, tokenizer)
    with pytest.raises(KeyError, match="not in the model"):
        engine.update_weights({"nope.weight": torch.zeros(1)}, version=3)
    assert engine.version == 0


def test_fp32_head_shrinks_generator_trainer_mismatch_on_a_bf16_body(tokenizer):
    """(b) Generator: bf16 body with KV cache; trainer: the same weights in fp32, one pass.

    A 1-layer, hidden-128 model at default (small) init with a scaled final norm: its logits
    are large and aligned with the hidden state, as in a trained LM, which is where the bf16
    rounding of the logits (digest §2.4) dominates the body's own bf16 error.
    """
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, eos_token_id=1,
    )
    generator_model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    with torch.no_grad():
        generator_model.model.norm.weight.fill_(4.0)
    trainer_model = copy.deepcopy(generator_model).float()
    stats = {}
    for fp32_head in (True, False):
        engine = TorchEngine(generator_model, tokenizer, fp32_head=fp32_head)
        out = engine.generate(PROMPTS * 4, SamplingParams(max_new_tokens=32, seed=0))
        gen = pad_sequence([torch.as_tensor(c.logprobs) for c in out], batch_first=True)
        train = pad_sequence([recompute_logprobs(trainer_model, c) for c in out], batch_first=True)
        mask = pad_sequence([torch.ones(c.num_tokens, dtype=torch.bool) for c in out], batch_first=True)
        stats[fp32_head] = mismatch(gen, train, mask)
    # Measured: mean |Δ log p| 0.0019 (fp32 head) vs 0.0042 (bf16 head).
    assert stats[True].mean_abs_diff < 0.7 * stats[False].mean_abs_diff
    assert abs(math.log(stats[True].is_ratio_max)) < abs(math.log(stats[False].is_ratio_max))
    assert abs(math.log(stats[True].is_ratio_min)) < abs(math.log(stats[False].is_ratio_min))


def test_generate_leaves_the_model_mode_as_it_found_it(model, tokenizer):
    model.train()
    TorchEngine(model, tokenizer).generate(PROMPTS, SamplingParams(max_new_tokens=3, seed=0))
    assert model.training


@pytest.mark.parametrize("fast", [True, False])
def test_repeated_prompts_share_one_prefill(model, tokenizer, fast):
    a, b = PROMPTS[1], PROMPTS[2]
    prefill_rows = []
    hook = model.model.register_forward_hook(lambda mod, args, kwargs, out: prefill_rows.append(
        kwargs["input_ids"].shape), with_kwargs=True)
    engine = TorchEngine(model, tokenizer, fast=fast)
    out = engine.generate([a, b, a, a], SamplingParams(max_new_tokens=12, seed=4))
    hook.remove()
    assert prefill_rows[0] == (2, len(a))  # a and b once each, b left-padded
    assert _max_gap(model, out) < 1e-5
    assert len({tuple(c.tokens) for c in (out[0], out[2], out[3])}) == 3  # own random streams
    single = engine.generate([a], SamplingParams(max_new_tokens=12, seed=4))
    np.testing.assert_array_equal(single[0].tokens, out[0].tokens)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_next_turn_reuses_its_history_kv_and_samples_as_a_full_prefill(arch, tokenizer):
    """``keep_prefixes``: the second call's prompts extend the first call's rows (sampled
    tokens + an observation); prefilling only the extension (the lean ``extend``, grouped
    kv heads, qwen2's biases) gives the full prefill's tokens and log-probs, and the
    trainer's recompute."""
    model = make_model(arch=arch)
    reuse = TorchEngine(model, tokenizer)
    reuse.keep_prefixes()
    first = reuse.generate(PROMPTS, SamplingParams(max_new_tokens=6, seed=3))
    observation = [40, 41, 42]
    histories = [[*c.prompt_tokens.tolist(), *c.tokens.tolist(), *observation[: 1 + i]] for i, c in enumerate(first)]
    histories.append([50, 51])  # a prompt nothing was kept for: a full prefill in the same batch
    kept = [reuse.prefixes.lookup(h)[0] for h in histories]
    # kept: the prompt and all sampled tokens but the last (never fed); then its rest is prefilled
    assert kept[:4] == [len(h) - 1 - len(observation[: 1 + i]) for i, h in enumerate(histories[:4])] and kept[4] == 0
    params = SamplingParams(max_new_tokens=8, seed=5)
    again = reuse.generate(histories, params)
    fresh = TorchEngine(model, tokenizer).generate(histories, params)
    for a, b in zip(again, fresh):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert _max_gap(model, again) < 1e-5
