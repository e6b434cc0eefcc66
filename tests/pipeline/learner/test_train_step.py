"""The learner step: filters reach the loss, micro-batching equals one full batch, masked
(injected) tokens get no gradient, and no-positive resampling is recorded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pipeline_helpers import CaptureGrads, learner_step

from scalerl.config import load_config
from scalerl.data.curriculum import PromptPool
from scalerl.models import build_model, build_task_tokenizer
from scalerl.types import Completion, Group

TOKENIZER = build_task_tokenizer()


def _model():
    return build_model("nano", len(TOKENIZER), seed=0, tokenizer=TOKENIZER)


def _batch(rewards, seed=0, forced_tail=0):
    rng = np.random.default_rng(seed)
    groups = []
    for p, row in enumerate(rewards):
        completions = []
        for _ in row:
            n = int(rng.integers(3, 9))
            mask = np.ones(n, dtype=bool)
            mask[n - forced_tail:] = False  # injected phrase tokens at the tail
            completions.append(Completion(
                prompt_tokens=rng.integers(5, 40, size=int(rng.integers(2, 5))),
                tokens=rng.integers(5, 40, size=n), logprobs=rng.uniform(-4, -1, n).astype(np.float32),
                versions=np.zeros(n, dtype=np.int64), loss_mask=mask, finish_reason="stop"))
        groups.append(Group(p, completions, np.array(row, dtype=np.float32), seq=p))
    return groups


def _grads(groups, overrides=(), model=None):
    cfg = load_config("scalerl", list(overrides))
    model = model or _model()
    opt = CaptureGrads(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    metrics = learner_step(model, opt, sched, groups, cfg, PromptPool(10, seed=0), 0, TOKENIZER.pad_token_id)
    return opt.grads, metrics


def test_micro_batches_sum_to_the_full_batch_gradient():
    groups = _batch([[1, -1, -1, 1], [1, 1, -1, -1], [-1, -1, -1, 1]])
    full, _ = _grads(groups, ["optim.micro_batch=64"])
    micro, _ = _grads(groups, ["optim.micro_batch=1"])
    for a, b in zip(full, micro):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_zero_variance_prompts_are_left_out_of_the_loss():
    mixed = _batch([[1, -1, -1, 1], [1, 1, 1, 1]])
    only_mixed = [mixed[0]]
    with_const, metrics = _grads(mixed)
    alone, _ = _grads(only_mixed)
    # prompt average over live prompts: the constant prompt adds nothing, not even a denominator
    for a, b in zip(with_const, alone):
        assert torch.allclose(a, b, atol=1e-7)
    assert metrics["effective_prompts"] == 1 and metrics["effective_batch"] == 0.5


def test_all_constant_batch_takes_no_optimiser_step():
    grads, metrics = _grads(_batch([[1, 1, 1, 1], [-1, -1, -1, -1]]))
    assert grads is None and metrics["step_trained_tokens"] == 0


def test_masked_injected_tokens_get_no_gradient():
    groups = _batch([[1, -1, 1, -1]], forced_tail=2)
    reference, _ = _grads(groups)
    for c in groups[0].completions:  # change only tokens under loss_mask == False
        c.tokens[~c.loss_mask] = 7
        c.logprobs[~c.loss_mask] = -30.0
    changed, _ = _grads(groups)
    # injected tokens sit at the tail, so they condition no loss token: the gradient is unchanged
    for a, b in zip(reference, changed):
        assert torch.allclose(a, b, atol=1e-7)


@pytest.mark.parametrize("name", ["cispo", "dapo", "grpo", "gspo", "reinforce"])
def test_every_loss_trains(name):
    grads, metrics = _grads(_batch([[1, -1, -1, 1], [1, -1, 1, 1]]), [f"loss.name={name}"])
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    assert metrics["is_ratio_max"] >= metrics["is_ratio_min"] > 0


def test_curriculum_records_pass_rates_and_retires_easy_prompts():
    cfg = load_config("scalerl")
    model = _model()
    opt = CaptureGrads(model.parameters())
    pool = PromptPool(10, seed=0, retire_threshold=0.9)
    groups = _batch([[1, 1, 1, 1], [1, -1, -1, -1]])
    learner_step(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), groups, cfg, pool, 0,
               TOKENIZER.pad_token_id)
    assert pool.is_retired(0) and not pool.is_retired(1)
    assert pool.pass_rate(1) == 0.25


def test_a_pass_rate_of_exactly_nine_tenths_retires_the_prompt():
    # G = 10 with 9 correct: 9/10 must equal the threshold 0.9, not float32's 0.89999998
    cfg = load_config("scalerl")
    model = _model()
    opt = CaptureGrads(model.parameters())
    pool = PromptPool(10, seed=0, retire_threshold=0.9)
    groups = _batch([[1] * 9 + [-1], [1] * 8 + [-1] * 2])
    learner_step(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), groups, cfg, pool, 0,
               TOKENIZER.pad_token_id)
    assert pool.pass_rate(0) == 0.9 and pool.is_retired(0)
    assert pool.pass_rate(1) == 0.8 and not pool.is_retired(1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_on_policy_importance_ratios_are_one_at_the_sampling_temperature(temperature):
    # real rollouts from the same weights: ρ = π_train / π_gen must be 1 for every token, which
    # holds only if the learner scores softmax(logits / τ) as the engine sampled it
    from scalerl.rollout.torch_engine import TorchEngine
    from scalerl.types import SamplingParams

    model = _model()
    engine = TorchEngine(model, TOKENIZER, fp32_head=True, seed=0)
    prompts = [TOKENIZER.encode("add 12+7 =")] * 4 + [TOKENIZER.encode("add 3+45 =")] * 4
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=temperature, seed=1))
    groups = [Group(p, outs[4 * p: 4 * p + 4], np.array([1, -1, 1, -1], dtype=np.float32)) for p in range(2)]
    overrides = [f"sampling.temperature={temperature}", "length.truncation_is_failure=false",
                 "length.truncation=keep"]
    _, metrics = _grads(groups, overrides, model=model)
    assert metrics["is_ratio_min"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["is_ratio_max"] == pytest.approx(1.0, abs=1e-4)
    # the same check as the logged mismatch: KL(gen || train) ≈ 0, every token fresh (version 0)
    assert 0 <= metrics["mismatch_kl"] < 1e-6 and metrics["mismatch_logp_abs_max"] < 1e-4
    assert metrics["mismatch_ratio_out_frac"] == 0 and metrics["mismatch_fresh_frac"] == 1.0
    assert metrics["mismatch_fresh_kl"] == pytest.approx(metrics["mismatch_kl"])


def test_mismatch_is_measured_on_every_step_and_fresh_tokens_are_told_apart():
    groups = _batch([[1, -1, -1, 1], [1, -1, 1, 1]])  # behaviour log-probs unrelated to the model
    _, metrics = _grads(groups)
    assert metrics["mismatch_kl"] > 0.1 and metrics["mismatch_ratio_out_frac"] > 0
    assert metrics["mismatch_fresh_frac"] == 1.0  # versions 0 = the learner's version here
    stale = _batch([[1, -1, -1, 1], [1, -1, 1, 1]])
    for g in stale:
        for c in g.completions:
            c.versions[:] = -1  # sampled by an older policy
    _, metrics = _grads(stale)
    assert metrics["mismatch_fresh_frac"] == 0.0 and "mismatch_fresh_kl" not in metrics


def _set_log_ratios(model, groups) -> list[np.ndarray]:
    """Behaviour log-probs ``log π_gen = log π_train − d`` so each token's ratio is ``ρ = e^d``:
    odd completions ``d = 1.5`` throughout (ρ 4.48), even ones alternate ``d = 0.2, −1.5``
    (ρ 1.22, 0.22; geometric mean e^−0.65 ≈ 0.52). Every ratio is far from a band edge."""
    from scalerl.algo.logprobs import token_logprobs
    from scalerl.models.forward import forward_logits

    ds = []
    with torch.no_grad():
        for i, c in enumerate(c for g in groups for c in g.completions):
            ids = torch.tensor([list(c.prompt_tokens) + list(c.tokens)])
            logits, _ = forward_logits(model, ids, fp32_head=True)
            logp = token_logprobs(logits[:, len(c.prompt_tokens) - 1: -1], ids[:, len(c.prompt_tokens):])[0]
            d = np.full(len(c.tokens), 1.5) if i % 2 else np.where(np.arange(len(c.tokens)) % 2, -1.5, 0.2)
            c.logprobs[:] = (logp.numpy() - d).astype(np.float32)
            ds.append(d)
    return ds


def _expected_correction(mode: str, ds: list[np.ndarray]) -> tuple[float, float]:
    """``(dropped share, mean weight of kept tokens)`` derived by hand from the log-ratios, with
    the recipe's bands: TIS cap 2, MIS [0.5, 2], sequence mask [0, 3] on the geometric mean."""
    rho = [np.exp(d) for d in ds]
    if mode == "tis":
        w = np.concatenate([np.minimum(r, 2.0) for r in rho])
        return 0.0, float(w.mean())
    if mode == "mis":
        r = np.concatenate(rho)
        keep = (r >= 0.5) & (r <= 2.0)
        return 1 - keep.mean(), float(r[keep].mean())
    seq = [np.full(len(d), np.exp(d.mean())) for d in ds]
    s = np.concatenate(seq)
    keep = s <= 3.0
    return 1 - keep.mean(), float(s[keep].mean())


@pytest.mark.parametrize("mode", ["tis", "mis", "seq_mask"])
def test_each_mismatch_correction_runs_a_real_step(mode):
    model = _model()
    groups = _batch([[1, -1, -1, 1], [1, -1, 1, 1]])
    ds = _set_log_ratios(model, groups)
    grads, metrics = _grads(groups, [f"loss.is_correction.mode={mode}"], model=model)
    plain, _ = _grads(groups, model=model)
    dropped, weight = _expected_correction(mode, ds)
    assert metrics["is_correction_dropped_frac"] == pytest.approx(dropped, abs=1e-6)
    assert metrics["is_correction_weight_mean"] == pytest.approx(weight, rel=1e-4)
    assert (0 < dropped < 1) if mode != "tis" else weight < np.exp(1.5)  # the band bites
    assert metrics["is_ratio_max"] == pytest.approx(1.0)  # the loss now sees its own log-probs
    assert any(g is not None and not torch.allclose(g, p) for g, p in zip(grads, plain))
    # and a real optimiser step moves the weights
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    cfg = load_config("scalerl", [f"loss.is_correction.mode={mode}"])
    out = learner_step(model, opt, sched, groups, cfg, PromptPool(10, seed=0), 0, TOKENIZER.pad_token_id)
    assert out["grad_norm"] > 0
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def _bf16_mismatch_kl(fp32_head: bool) -> float:
    """mismatch_kl of a train step on real rollouts of a bf16 model whose head is confident
    (weights ×10, as after training): engine and trainer share weights, not kernels."""
    from scalerl.rollout.torch_engine import TorchEngine
    from scalerl.types import SamplingParams

    model = build_model("nano", len(TOKENIZER), seed=0, tokenizer=TOKENIZER, dtype=torch.bfloat16)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(10.0)
    engine = TorchEngine(model, TOKENIZER, fp32_head=fp32_head, seed=0)
    prompts = [TOKENIZER.encode(f"add {i}+{2 * i + 3} =") for i in range(4) for _ in range(4)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=24, seed=1))
    groups = [Group(p, outs[4 * p: 4 * p + 4], np.array([1, -1, 1, -1], dtype=np.float32)) for p in range(4)]
    _, metrics = _grads(groups, [f"model.fp32_head_trainer={fp32_head}", "length.truncation_is_failure=false",
                                 "length.truncation=keep"], model=model)
    return metrics["mismatch_kl"]


def test_the_fp32_head_cuts_the_bf16_mismatch():
    # the paper's FP32-head claim (digest §2.4), measured: same bf16 body, head in fp32 or not
    bf16_head, fp32_head = _bf16_mismatch_kl(False), _bf16_mismatch_kl(True)
    assert bf16_head > 0 and fp32_head < 0.85 * bf16_head


def test_float16_loss_scaling_gives_the_float32_gradient():
    # fp16 autocast over fp32 master weights with a loss scale of 2^12: the optimiser must see
    # the unscaled gradient, equal to the fp32 one up to fp16 rounding (run on CPU here; the
    # config allows float16 only on CUDA)
    groups = _batch([[1, -1, -1, 1], [1, -1, 1, 1]])
    plain, _ = _grads(groups)
    cfg = load_config("scalerl")
    model = _model()
    opt = CaptureGrads(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    metrics = learner_step(model, opt, sched, groups, cfg, PromptPool(10, seed=0), 0, TOKENIZER.pad_token_id,
                         scaler=scaler)
    assert metrics["loss_scale"] == 2.0 ** 12 and opt.grads is not None
    num = sum(float((g - p).norm() ** 2) for g, p in zip(opt.grads, plain) if g is not None)
    den = sum(float(p.norm() ** 2) for p in plain if p is not None)
    assert (num / den) ** 0.5 < 0.02


def test_a_step_with_the_head_in_chunks_is_the_whole_heads_step():
    """``optim.head_chunk_tokens`` reaches the step, and scoring the head five positions at a time
    (recomputed in the backward) gives the whole head's loss, metrics and gradients. In float64
    (a float64 body and head), where every reduction here (length n ≤ 10^4) rounds by at most
    ``λ √n u ≈ 4e-14`` relative (``u = 2^-53``, λ = 4): the bound below is that, times 10 for
    the layers it passes through."""
    groups = _batch([[1, -1, -1, 1], [1, 1, -1, -1], [-1, -1, -1, 1]])
    common = ["model.fp32_head_trainer=false"]
    whole, m_whole = _grads(groups, [*common, "optim.head_chunk_tokens=null"], model=_model().double())
    chunked, m_chunked = _grads(groups, [*common, "optim.head_chunk_tokens=5"], model=_model().double())
    bound = 10 * 4 * (1e4) ** 0.5 * 2.0**-53
    for key in ("loss", "entropy"):
        assert m_chunked[key] == pytest.approx(m_whole[key], rel=bound), key
    a = torch.cat([g.flatten() for g in whole if g is not None])
    b = torch.cat([g.flatten() for g in chunked if g is not None])
    assert float((a - b).norm() / a.norm()) <= bound
