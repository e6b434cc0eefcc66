import pytest
import torch

from scalerl.models.build import ARCHS, PRESETS, build_model, count_parameters

VOCAB = 140
# Measured counts (llama, untied, vocab 140); the ranges are the promised sizes.
EXPECTED = {"nano": (0.7e6, 1.3e6), "micro": (2e6, 4e6), "small": (9e6, 15e6), "base": (40e6, 60e6),
            "large": (100e6, 300e6), "qwen-0.5b": (494_032_768, 494_032_768)}


@pytest.mark.parametrize("preset", ["nano", "micro", "small"])
@pytest.mark.parametrize("arch", ARCHS)
def test_preset_parameter_counts_in_range(preset, arch):
    lo, hi = EXPECTED[preset]
    model = build_model(preset, VOCAB, arch=arch)
    assert lo <= count_parameters(model) <= hi
    assert type(model).__name__.lower().startswith(arch)


@pytest.mark.parametrize("preset", ["base", "large"])
def test_big_preset_sizes_from_config_alone(preset):
    # Build on the meta device: counting 50M-190M params needs no memory or init time.
    from transformers import AutoModelForCausalLM

    from scalerl.models.build import model_config

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config(preset, VOCAB))
    lo, hi = EXPECTED[preset]
    assert lo <= count_parameters(model) <= hi


def test_the_half_billion_preset_is_qwen2_5_0_5b_s_shape():
    """Qwen2.5-0.5B's count by hand: the tied embedding 151,936 × 896 = 136,134,656; per layer
    q 896·896 + 896, k and v 896·128 + 128 each (2 KV heads of 64), o 896·896, the MLP 3·896·4864,
    two norms 2·896: 14,912,384, times 24 layers; the final norm 896. In all 494,032,768."""
    from transformers import AutoModelForCausalLM

    from scalerl.models.build import model_config

    config = model_config("qwen-0.5b", VOCAB, arch="qwen2")
    assert (config.vocab_size, config.tie_word_embeddings, config.num_key_value_heads) == (151_936, True, 2)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    per_layer = (896 * 896 + 896) + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896
    assert count_parameters(model) == 151_936 * 896 + 24 * per_layer + 896 == 494_032_768


def test_every_preset_is_tested():
    assert set(PRESETS) == set(EXPECTED)


def test_seeded_build_is_deterministic_and_seeds_differ():
    a, b, c = (build_model("nano", VOCAB, seed=s) for s in (3, 3, 4))
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_tied_embeddings_share_the_matrix():
    model = build_model("nano", VOCAB, tie_embeddings=True)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert count_parameters(model) < count_parameters(build_model("nano", VOCAB))


def test_dtype_and_kv_cache_generation():
    model = build_model("nano", VOCAB, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    model = build_model("nano", VOCAB)
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        cached = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], past_key_values=cached.past_key_values).logits[:, -1]
    torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-5)


def test_a_built_gpt2_has_no_dropout_and_round_trips_with_the_task_tokenizer(tmp_path):
    """A GPT-2 built for RL samples and learns with one forward: its dropout is off, untied, and
    its folder loads back (model and task tokenizer) with the same logits."""
    from scalerl.models import build_task_tokenizer
    from scalerl.models.load import load_pretrained, save_pretrained

    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), arch="gpt2", tokenizer=tokenizer)
    assert type(model).__name__ == "GPT2LMHeadModel" and model.config.eos_token_id == tokenizer.eos_token_id
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    ids = torch.tensor([tokenizer.encode("12+30=")])
    model.train()  # dropout off even in train mode: the learner's forward equals the sampler's
    with torch.no_grad():
        before = model(ids).logits
    loaded, loaded_tokenizer = load_pretrained(save_pretrained(model, tokenizer, tmp_path / "gpt2"))
    assert loaded_tokenizer.encode("12+30=") == tokenizer.encode("12+30=")
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, before, atol=0.0, rtol=0.0)


def test_unknown_preset_and_arch_are_rejected():
    with pytest.raises(ValueError, match="unknown model preset"):
        build_model("huge", VOCAB)
    with pytest.raises(ValueError, match="unknown architecture"):
        build_model("nano", VOCAB, arch="mamba")
