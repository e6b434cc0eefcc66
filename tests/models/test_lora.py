"""LoRA: adapters train and travel alone; a generator's merge samples what the learner scores."""

import copy
import json

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
    resolve_targets,
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
    ((), 4, "model.lora.targets is empty: name the linear layers of M to adapt (its linear layers are q_proj"),
    (("lm_head",), 4, "model.lora.targets names lm_head, the LM head of M, which stays frozen"),
    (("q_proj", "qproj"), 4, "model.lora.targets names 'qproj', which is no linear layer of M; "
                             "its linear layers are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"),
    (("q_proj", "up_proj"), 10_000, "model.lora.rank 10000 is more than 128, the smaller size of the targeted layer q_proj (128 in, 128 out)"),
])
def test_targets_and_rank_the_model_cannot_take_are_one_sentence(chat_dir, targets, rank, words):
    model, _ = load_pretrained(chat_dir)
    spec = LoraSpec(rank=rank, alpha=8.0, dropout=0.0, targets=targets)
    with pytest.raises(ValueError) as err:
        resolve_targets(model, spec, "M")
    assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError):  # the learner's own check, should preflight have let it through
        apply_lora(model, spec)
    assert resolve_targets(model, SPEC, "M") == SPEC  # the tests' own spec fits, and is already explicit


# --- any decoder: GPT-2's Conv1D (weights stored (in, out)), Llama, Qwen2 -----------------------

AUTO = {"gpt2": ("c_attn", "c_proj", "c_fc"),
        "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}
AUTO["qwen2"] = AUTO["llama"]
ARCHS = sorted(AUTO)


def adapted(model_dir, seed: int = 0):
    """``model_dir``'s model with auto-targeted rank-4 adapters whose B is no longer 0."""
    lora = apply_lora(load_pretrained(model_dir)[0], LoraSpec(rank=4, alpha=8.0, dropout=0.0))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(seed + len(name)))
    return lora


@pytest.mark.parametrize("arch", ARCHS)
def test_auto_targets_are_the_projections_of_the_decoder_blocks(decoder_dirs, arch):
    model, _ = load_pretrained(decoder_dirs[arch])
    spec = resolve_targets(model, LoraSpec(rank=4, alpha=8.0, dropout=0.0), "M")
    assert spec.targets == AUTO[arch]  # never lm_head or the embeddings
    assert spec.fan_in_fan_out == (AUTO["gpt2"] if arch == "gpt2" else ())  # Conv1D stores W (in, out)
    lora = apply_lora(model, LoraSpec(rank=4, alpha=8.0, dropout=0.0))
    assert set(lora.peft_config["default"].target_modules) == set(AUTO[arch])
    adapted_layers = {n.rsplit(".", 1)[-1] for n, m in lora.named_modules() if hasattr(m, "lora_A")}
    assert adapted_layers == set(AUTO[arch])
    # peft's own per-layer knowledge agrees: Conv1D layers are its fan_in_fan_out ones
    assert all(m.fan_in_fan_out == (arch == "gpt2") for m in lora.modules() if hasattr(m, "lora_A"))


@pytest.mark.parametrize("arch", ARCHS)
def test_a_generator_s_merge_is_peft_s_merge_and_unload(decoder_dirs, arch):
    """What a generator loads (adapters merged into ``W0`` read from the safetensors) is what
    peft's ``merge_and_unload`` makes, and the plain model then scores as the adapted one."""
    lora = adapted(decoder_dirs[arch])
    spec = resolve_targets(load_pretrained(decoder_dirs[arch])[0], LoraSpec(4, 8.0, 0.0), "M")
    merged = AdapterMerger(base_weights(decoder_dirs[arch], spec.targets), spec)(
        {n: p.detach() for n, p in published_parameters(lora)})
    want = copy.deepcopy(lora).merge_and_unload().state_dict()
    assert len(merged) == 2 * len(AUTO[arch]) + (2 if arch == "gpt2" else 0)  # 2 blocks; GPT-2 has 2 c_proj each
    for name, value in merged.items():
        assert value.shape == want[name].shape and (value - want[name]).abs().max() < 1e-6, name
    generator, _ = load_pretrained(decoder_dirs[arch])
    assert not set(merged) - set(generator.state_dict())  # every name is the generator model's own
    generator.load_state_dict(merged, strict=False)
    with torch.no_grad():
        assert (forward_logits(generator, IDS)[0] - forward_logits(lora, IDS)[0]).abs().max() < 1e-5


def test_merge_by_hand_of_a_layer_stored_in_out():
    """A square ``Conv1D`` (GPT-2's attention c_proj): the shapes alone cannot tell ``B A`` from
    its transpose, ``fan_in_fan_out`` does."""
    a, b, w0 = torch.randn(2, 3), torch.randn(3, 2), torch.randn(3, 3)
    adapters = {"base_model.model.h.0.c_proj.lora_A.default.weight": a,
                "base_model.model.h.0.c_proj.lora_B.default.weight": b}
    got = merged_weights(adapters, {"h.0.c_proj.weight": w0}, scale=0.5, fan_in_fan_out={"c_proj"})
    assert torch.allclose(got["h.0.c_proj.weight"], w0 + 0.5 * (b @ a).T)
    plain = merged_weights(adapters, {"h.0.c_proj.weight": w0}, scale=0.5)
    assert torch.allclose(plain["h.0.c_proj.weight"], w0 + 0.5 * b @ a)


def test_merge_reads_a_checkpoint_saved_without_the_model_s_prefix():
    """GPT-2's own files name ``transformer.h.0.attn.c_attn`` as ``h.0.attn.c_attn``; the merged
    weight keeps the model's name, which every engine loads."""
    a, b, w0 = torch.randn(2, 3), torch.randn(4, 2), torch.randn(3, 4)
    got = merged_weights({"base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight": a,
                          "base_model.model.transformer.h.0.attn.c_attn.lora_B.default.weight": b},
                         {"h.0.attn.c_attn.weight": w0, "h.1.attn.c_attn.weight": -w0}, scale=1.0,
                         fan_in_fan_out={"c_attn"})
    assert list(got) == ["transformer.h.0.attn.c_attn.weight"]
    assert torch.allclose(got["transformer.h.0.attn.c_attn.weight"], w0 + (b @ a).T)


@pytest.mark.parametrize("arch", ARCHS)
def test_export_of_any_decoder_reloads_with_peft_and_transformers(decoder_dirs, arch, tmp_path):
    """The adapter (``PeftModel.from_pretrained``) and ``merged/`` (``AutoModelForCausalLM``) give
    the trained model's logits and greedy tokens; a tied head is written once."""
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    lora = adapted(decoder_dirs[arch])
    state = {k: v.clone() for k, v in lora.state_dict().items()}  # as a checkpoint holds it: a tensor per name
    out = write_model_dir(tmp_path / "model", lora, load_pretrained(decoder_dirs[arch])[1], state=state)
    assert set(json.loads((out / "adapter_config.json").read_text())["target_modules"]) == set(AUTO[arch])
    with torch.no_grad():
        want = forward_logits(lora, IDS)[0]
        merged = AutoModelForCausalLM.from_pretrained(out / "merged")
        peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(decoder_dirs[arch]), out)
        for model in (merged, peft):
            assert (forward_logits(model, IDS)[0] - want).abs().max() < 1e-5
        greedy = [m.generate(IDS, max_new_tokens=4, do_sample=False, pad_token_id=0) for m in (merged, peft)]
        assert torch.equal(greedy[0], greedy[1])
    with safe_open(str(out / "merged" / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    tied = merged.config.tie_word_embeddings
    assert ("lm_head.weight" in names) != tied and len(names) == len(list(merged.parameters()))
