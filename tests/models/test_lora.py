"""LoRA: adapters train and travel alone; a generator's merge samples what the learner scores."""

import pytest
import torch

from scalerl.models.export import write_model_dir
from scalerl.models.forward import forward_logits
from scalerl.models.load import load_pretrained
from scalerl.models.lora import (
    AdapterMerger,
    LoraSpec,
    apply_lora,
    base_weights,
    merged_weights,
    published_parameters,
)
from scalerl.models.tiny_chat import build_chat_model_dir

SPEC = LoraSpec(rank=4, alpha=8.0, dropout=0.0, targets=("q_proj", "v_proj", "up_proj", "down_proj"))
IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat_model_dir(tmp_path_factory.mktemp("chat") / "model")


def trained_lora(chat_dir):
    model, tokenizer = load_pretrained(chat_dir)
    lora = apply_lora(model, SPEC)
    with torch.no_grad():  # B starts at 0 (the base model): give the adapters a trained look
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    return lora, tokenizer


def test_merge_by_hand():
    a, b, w0 = torch.randn(2, 3), torch.randn(4, 2), torch.randn(4, 3)
    got = merged_weights({"base_model.model.x.lora_A.default.weight": a, "base_model.model.x.lora_B.default.weight": b},
                         {"x.weight": w0}, scale=0.5)
    assert torch.allclose(got["x.weight"], w0 + 0.5 * b @ a)


def test_only_adapters_train_and_travel(chat_dir):
    lora, _ = trained_lora(chat_dir)
    sent = published_parameters(lora)
    assert sent and all(".lora_" in n and p.requires_grad for n, p in sent)
    frozen = [n for n, p in lora.named_parameters() if not p.requires_grad]
    assert any("lm_head" in n for n in frozen)  # the FP32 head reads the frozen head weight
    everything = sum(p.numel() for p in lora.parameters())
    assert sum(p.numel() for _, p in sent) * 5 < everything


def test_generator_samples_with_the_adapter(chat_dir):
    lora, _ = trained_lora(chat_dir)
    generator, _ = load_pretrained(chat_dir)
    base_logits = forward_logits(generator, IDS)[0]
    merger = AdapterMerger(base_weights(chat_dir, SPEC.targets), SPEC)
    generator.load_state_dict(merger({n: p.detach() for n, p in published_parameters(lora)}), strict=False)
    with torch.no_grad():
        trainer = torch.log_softmax(forward_logits(lora, IDS)[0], -1)
        sampler = torch.log_softmax(forward_logits(generator, IDS)[0], -1)
    assert (trainer - sampler).abs().max() < 1e-4  # the generator's log-probs are the trainer's
    assert (torch.log_softmax(base_logits, -1) - sampler).abs().max() > 1e-2  # ... not the base's
    # a second version merges from W0 again, never on top of the first merge
    again = merger({n: p.detach() for n, p in published_parameters(lora)})
    assert all(torch.equal(again[k], generator.state_dict()[k]) for k in again)


def test_the_learner_s_own_engine_samples_with_the_adapter(chat_dir):
    """Evaluation on the learner decodes the peft model: the lean path, which reads each
    layer's weight and so would miss the adapters, is refused; the log-probs of the sampled
    tokens are the trainer's."""
    from scalerl.algo.logprobs import token_logprobs
    from scalerl.rollout import fast_decode
    from scalerl.rollout.torch_engine import TorchEngine
    from scalerl.types import SamplingParams

    lora, tokenizer = trained_lora(chat_dir)
    assert not fast_decode.supports(lora)
    engine = TorchEngine(lora, tokenizer, fp32_head=True, seed=0)
    c = engine.generate([IDS[0].tolist()], SamplingParams(max_new_tokens=6, seed=3))[0]
    ids = torch.tensor([[*IDS[0].tolist(), *c.tokens.tolist()]])
    with torch.no_grad():
        logits = forward_logits(lora, ids[:, :-1])[0][:, IDS.shape[1] - 1:]
        trainer = token_logprobs(logits, ids[:, IDS.shape[1]:])[0]
    assert torch.allclose(torch.as_tensor(c.logprobs), trainer, atol=1e-4)


def test_a_bf16_checkpoint_loses_no_update_in_a_float32_generator(chat_dir, tmp_path):
    from scalerl.models.load import save_pretrained

    model, tokenizer = load_pretrained(chat_dir)
    bf16 = save_pretrained(model.to(torch.bfloat16), tokenizer, tmp_path / "bf16")
    base = base_weights(bf16, SPEC.targets)
    name = next(iter(base))
    assert base[name].dtype == torch.float32  # read as the engine computes, not as stored
    layer = name[: -len(".weight")]
    a = torch.zeros(SPEC.rank, base[name].shape[1])
    b = torch.zeros(base[name].shape[0], SPEC.rank)
    a[0, 0], b[0, 0] = 1.0, 1e-6  # an update far below bf16's spacing at these weights
    merged = AdapterMerger(base, SPEC)({f"base_model.model.{layer}.lora_A.default.weight": a,
                                        f"base_model.model.{layer}.lora_B.default.weight": b})[name]
    assert merged.dtype == torch.float32
    assert abs((merged - base[name])[0, 0].item() - SPEC.scale * 1e-6) < 1e-9


def test_export_adapter_and_merged(chat_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    lora, tokenizer = trained_lora(chat_dir)
    out = write_model_dir(tmp_path / "model", lora, tokenizer)
    with torch.no_grad():
        want = forward_logits(lora, IDS)[0]
        merged = AutoModelForCausalLM.from_pretrained(out / "merged")
        assert (forward_logits(merged, IDS)[0] - want).abs().max() < 1e-4
        adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(chat_dir), out)
        assert (forward_logits(adapter, IDS)[0] - want).abs().max() < 1e-5
    assert (out / "merged" / "tokenizer.json").is_file() and not (out / "model.safetensors").exists()


def test_targets_must_name_layers(chat_dir):
    assert len(base_weights(chat_dir, SPEC.targets)) == 4 * 4  # 4 targets x nano's 4 layers
    with pytest.raises(ValueError, match="name no linear layer"):
        base_weights(chat_dir, ("nothing",))


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_fused_layer_equals_peft_s_own(chat_dir, dropout):
    """The fused forward (dropout 0) and peft's path (dropout > 0 falls back to it) give
    peft's outputs and gradients."""
    from peft import LoraConfig, get_peft_model

    spec = LoraSpec(4, 8.0, dropout, SPEC.targets)
    fast = apply_lora(load_pretrained(chat_dir)[0], spec)
    plain = get_peft_model(load_pretrained(chat_dir)[0], LoraConfig(
        r=4, lora_alpha=8.0, lora_dropout=dropout, target_modules=list(SPEC.targets), bias="none"))
    assert type(fast.base_model.model.model.layers[0].self_attn.q_proj).__name__ == "FusedLoraLinear"
    with torch.no_grad():
        for name, p in plain.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    fast.load_state_dict(plain.state_dict())
    grads = []
    for model in (fast, plain):
        model.train()
        torch.manual_seed(0)  # the same dropout masks in both
        logits = forward_logits(model, IDS)[0]
        (logits.square().mean()).backward()
        grads.append((logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-5)
    assert grads[0][1].keys() == grads[1][1].keys()
    for name, g in grads[0][1].items():
        assert torch.allclose(g, grads[1][1][name], atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("targets, rank, words", [
    ((), 4, "model.lora.targets is empty: name the linear layers of M to adapt (its linear layers are down_proj"),
    (("lm_head",), 4, "model.lora.targets names lm_head, the LM head of M, which stays frozen"),
    (("q_proj", "qproj"), 4, "model.lora.targets names 'qproj', which is no linear layer of M; "
                             "its linear layers are down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"),
    (("q_proj", "up_proj"), 10_000, "model.lora.rank 10000 is more than 128, the smaller size of the targeted layer q_proj (128 in, 128 out)"),
])
def test_targets_and_rank_the_model_cannot_take_are_one_sentence(chat_dir, targets, rank, words):
    from scalerl.models.lora import check_targets

    model, _ = load_pretrained(chat_dir)
    spec = LoraSpec(rank=rank, alpha=8.0, dropout=0.0, targets=targets)
    with pytest.raises(ValueError) as err:
        check_targets(model, spec, "M")
    assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError):  # the learner's own check, should preflight have let it through
        apply_lora(model, spec)
    check_targets(model, SPEC, "M")  # the tests' own spec fits
