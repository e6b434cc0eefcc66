"""The shared-prompt learner forward (``pipeline.learner.packing``) against the plain prompt+completion
path: same logits, same loss, same gradient on every parameter; honest token counts; and
micro-batches that keep a prompt's rows together."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pipeline_helpers import CaptureGrads, learner_step

from scalerl.config import load_config
from scalerl.data.curriculum import PromptPool
from scalerl.models import build_model, build_task_tokenizer
from scalerl.pipeline.learner.packing import forward_slots, micro_batches, shared_prompt_hidden
from scalerl.pipeline.learner.train_step import _micro_batch_hidden
from scalerl.types import Completion, Group

TOKENIZER = build_task_tokenizer()
PAD = TOKENIZER.pad_token_id


def _groups(prompt_lens, G=5, lengths=(1, 9), seed=0) -> list[Group]:
    """Groups whose G completions share one prompt (of ``prompt_lens[p]`` tokens), with
    completion lengths drawn from ``lengths`` (inclusive) and mixed ±1 rewards."""
    rng = np.random.default_rng(seed)
    groups = []
    for p, n_prompt in enumerate(prompt_lens):
        prompt = rng.integers(5, 40, size=n_prompt)
        completions = []
        for _ in range(G):
            n = int(rng.integers(lengths[0], lengths[1] + 1))
            completions.append(Completion(
                prompt_tokens=prompt.copy(), tokens=rng.integers(5, 40, size=n),
                logprobs=rng.uniform(-4, -1, n).astype(np.float32), versions=np.zeros(n, dtype=np.int64),
                loss_mask=np.ones(n, dtype=bool), finish_reason="stop"))
        rewards = np.where(np.arange(G) % 2 == 0, 1.0, -1.0).astype(np.float32)
        groups.append(Group(p, completions, rewards, seq=p))
    return groups


def _model(dtype=torch.float32, arch="llama"):
    return build_model("nano", len(TOKENIZER), seed=0, tokenizer=TOKENIZER, dtype=dtype, arch=arch)


def _step(groups, overrides, dtype=torch.float32, arch="llama"):
    cfg = load_config("scalerl", list(overrides))
    model = _model(dtype, arch)
    opt = CaptureGrads(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    metrics = learner_step(model, opt, sched, groups, cfg, PromptPool(10, seed=0), 0, PAD)
    return opt.grads, metrics


def _assert_same_step(groups, overrides, tol, dtype=torch.float32, arch="llama"):
    plain, m_plain = _step(groups, [*overrides, "optim.shared_prompt=false"], dtype, arch)
    shared, m_shared = _step(groups, [*overrides, "optim.shared_prompt=true"], dtype, arch)
    # the loss sums ± advantage terms that nearly cancel: a relative test on the sum alone
    # would measure float32 summation order, so it gets an absolute floor of tol × 1e-2;
    # every gradient below is the strict check
    assert m_shared["loss"] == pytest.approx(m_plain["loss"], rel=tol, abs=tol * 1e-2)
    assert m_shared["is_ratio_max"] == pytest.approx(m_plain["is_ratio_max"], rel=tol)
    for a, b in zip(plain, shared, strict=True):
        assert (a is None) == (b is None)
        if a is not None:  # relative to each parameter's own gradient scale
            torch.testing.assert_close(b.float(), a.float(), rtol=tol, atol=tol * float(a.abs().max()))
    return m_plain, m_shared


@pytest.mark.parametrize("fp32_head", [True, False])
@pytest.mark.parametrize("micro_batch", [64, 5, 3])  # whole batch, one group each, and 3 ∤ G = 5
def test_shared_prompt_step_equals_the_plain_step(micro_batch, fp32_head):
    # prompts of 1, 4 and 7 tokens, completions of 1–9 tokens: padding on both halves
    groups = _groups([4, 1, 7])
    _assert_same_step(groups, [f"optim.micro_batch={micro_batch}", f"model.fp32_head_trainer={fp32_head}"], 1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: attention biases on the cached path
def test_shared_prompt_equals_plain_for_each_architecture(arch):
    _assert_same_step(_groups([3, 6], G=4, seed=2), ["optim.micro_batch=3"], 1e-5, arch=arch)


def test_single_token_completions_take_the_prompt_only_branch():
    # every completion has one token: its logits come from the prompt's last position alone
    _assert_same_step(_groups([2, 5], G=4, lengths=(1, 1)), ["optim.micro_batch=64"], 1e-5)


def test_rows_of_one_group_with_different_prompts_are_not_merged():
    # (interrupted / re-prompted rows may differ): only identical prompts share a forward
    groups = _groups([3, 3], G=4, seed=3)
    groups[0].completions[1].prompt_tokens = np.array([9, 9, 9, 9, 9])
    _, m_shared = _assert_same_step(groups, ["optim.micro_batch=64"], 1e-5)
    completion_inputs = sum(c.num_tokens - 1 for g in groups for c in g.completions)
    assert m_shared["step_trained_tokens"] == 3 + 5 + 3 + completion_inputs


@pytest.mark.parametrize("fp32_head", [True, False])  # in a bf16 body the head dtype matters
def test_bf16_shared_prompt_step_is_close_to_the_plain_step(fp32_head):
    # bfloat16 body (8-bit mantissa): the two paths sum in different orders, so compare the
    # whole gradient at bf16 precision (measured: ~1% relative difference) rather than per element
    groups = _groups([4, 1, 7])
    overrides = ["optim.micro_batch=3", f"model.fp32_head_trainer={fp32_head}"]
    plain, m_plain = _step(groups, [*overrides, "optim.shared_prompt=false"], torch.bfloat16)
    shared, m_shared = _step(groups, overrides, torch.bfloat16)
    a = torch.cat([g.float().flatten() for g in plain if g is not None])
    b = torch.cat([g.float().flatten() for g in shared if g is not None])
    assert m_shared["loss"] == pytest.approx(m_plain["loss"], rel=1e-2)
    assert float((a - b).norm() / a.norm()) < 3e-2


def test_shared_hidden_states_equal_the_plain_ones_row_by_row():
    groups = _groups([4, 1, 7], seed=4)
    completions = [c for g in groups for c in g.completions]
    model = _model()
    idx = [0, 1, 6, 7, 8, 14]  # rows of three groups, the prompt lengths differ
    T = max(c.num_tokens for c in completions)
    with torch.no_grad():
        plain, *_ = _micro_batch_hidden(model, completions, idx, T, PAD, torch.device("cpu"))
        shared, real, slots = shared_prompt_hidden(model, completions, idx, pad_id=PAD, device=torch.device("cpu"))
    for r, i in enumerate(idx):
        n = completions[i].num_tokens
        torch.testing.assert_close(shared[r, :n], plain[r, :n], rtol=1e-5, atol=1e-5)
    assert shared.shape[1] == max(completions[i].num_tokens for i in idx)
    # three distinct prompts (4 + 1 + 7 tokens) once, each completion but its last token
    assert real == 12 + sum(completions[i].num_tokens - 1 for i in idx)
    assert slots == 3 * 7 + len(idx) * (shared.shape[1] - 1)


def test_trained_tokens_count_what_each_path_forwards():
    groups = _groups([4, 1, 7])
    completions = [c for g in groups for c in g.completions]
    _, m_plain = _step(groups, ["optim.micro_batch=64", "optim.shared_prompt=false"])
    _, m_shared = _step(groups, ["optim.micro_batch=64"])
    # plain: every row's prompt + completion; shared: each prompt once, completions less their last token
    assert m_plain["step_trained_tokens"] == sum(len(c.prompt_tokens) + c.num_tokens for c in completions)
    assert m_shared["step_trained_tokens"] == 4 + 1 + 7 + sum(c.num_tokens - 1 for c in completions)
    assert m_shared["step_padded_tokens"] == forward_slots(completions, list(range(15))) >= m_shared["step_trained_tokens"]
    assert m_plain["step_padded_tokens"] == 15 * max(len(c.prompt_tokens) + c.num_tokens for c in completions)


@pytest.mark.parametrize("micro_batch", [5, 2])
def test_a_prompt_split_over_micro_batches_counts_once_in_each(micro_batch):
    groups = _groups([4, 1, 7])
    completions = [c for g in groups for c in g.completions]
    _, metrics = _step(groups, [f"optim.micro_batch={micro_batch}"])
    chunks = micro_batches(completions, list(range(15)), micro_batch)
    # each chunk forwards the distinct prompts of its rows (row i belongs to group i // 5)
    recomputed = sum(sum(len(groups[g].completions[0].prompt_tokens) for g in {i // 5 for i in c}) for c in chunks)
    assert metrics["step_trained_tokens"] == recomputed + sum(c.num_tokens - 1 for c in completions)
    assert metrics["step_padded_tokens"] == sum(forward_slots(completions, c) for c in chunks)


def test_micro_batches_are_a_partition_of_the_live_rows():
    groups = _groups([4, 1, 7], G=5, seed=5)
    completions = [c for g in groups for c in g.completions]
    rows = [i for i in range(15) if i != 3]  # one row is out of the loss
    chunks = micro_batches(completions, rows, 4)
    assert sorted(i for c in chunks for i in c) == rows and [len(c) for c in chunks] == [4, 4, 4, 2]


def test_long_shared_prompts_keep_a_groups_rows_together():
    # 40-token prompts, 1–9-token completions: recomputing a prompt costs more than padding
    groups = _groups([40, 38, 42], G=5, seed=6)
    completions = [c for g in groups for c in g.completions]
    order = [i for c in micro_batches(completions, list(range(15)), 5) for i in c]
    assert [i // 5 for i in order] == [2] * 5 + [0] * 5 + [1] * 5  # longest group first
    for g in range(3):  # inside a group: longest completion first
        lengths = [completions[i].num_tokens for i in order if i // 5 == g]
        assert lengths == sorted(lengths, reverse=True)


def test_short_prompts_with_spread_lengths_bucket_rows_by_length():
    # 1-token prompts, 1–60-token completions: padding costs more than recomputing a prompt
    groups = _groups([1, 1, 1], G=5, lengths=(1, 60), seed=7)
    for p, g in enumerate(groups):  # distinct prompts
        for c in g.completions:
            c.prompt_tokens = np.array([5 + p])
    completions = [c for g in groups for c in g.completions]
    chunks = micro_batches(completions, list(range(15)), 4)
    lengths = [completions[i].num_tokens for c in chunks for i in c]
    assert lengths == sorted(lengths, reverse=True)
    assert sum(forward_slots(completions, c) for c in chunks) < sum(
        forward_slots(completions, list(range(s, min(s + 4, 15)))) for s in range(0, 15, 4))


def test_a_token_budget_cuts_micro_batches_and_keeps_the_step_equal():
    groups = _groups([4, 1, 7], G=5, lengths=(1, 12), seed=8)
    completions = [c for g in groups for c in g.completions]
    chunks = micro_batches(completions, list(range(15)), 64, max_slots=30)
    assert sorted(i for c in chunks for i in c) == list(range(15)) and len(chunks) > 1
    assert all(forward_slots(completions, c) <= 30 or len(c) == 1 for c in chunks)
    assert len(micro_batches(completions, list(range(15)), 64, max_slots=None)) == 1
    # the budget only regroups rows: loss and every gradient are the plain path's
    _assert_same_step(groups, ["optim.micro_batch=64", "optim.micro_batch_tokens=30"], 1e-5)
