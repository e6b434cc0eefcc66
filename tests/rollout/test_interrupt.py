"""Forced interruptions (digest §2.9): fire at the drawn point, inject the phrase, mask it."""

import numpy as np
import torch

from scalerl.rollout.interrupt import interruption_points
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import SamplingParams

from .tiny import make_model, recompute_logprobs, with_head_bias

EOS, CLOSE = 1, 3  # ids in tiny.make_tokenizer
PROMPTS = [[5, 6, 7], [8, 9, 10, 11], [20], [30, 31]] * 4


def _never_closes():
    """A model that can emit neither ``</think>`` nor EOS on its own."""
    return with_head_bias(make_model(tied=False), {CLOSE: -1e4, EOS: -1e4})


def test_phrase_injected_at_the_drawn_point_then_answer_then_cut(tokenizer):
    model = _never_closes()
    phrase = tokenizer.encode(SamplingParams().interruption_phrase, add_special_tokens=False)
    lo, hi, budget = 3, 9, 5
    params = SamplingParams(max_new_tokens=64, interrupt_range=(lo, hi), answer_budget=budget, seed=4)
    out = TorchEngine(model, tokenizer).generate(PROMPTS, params)
    points = interruption_points(4, len(PROMPTS), lo, hi).tolist()
    assert len(set(points)) > 1 and all(lo <= p <= hi for p in points)
    for c, point in zip(out, points):
        forced = np.flatnonzero(~c.loss_mask)
        np.testing.assert_array_equal(forced, np.arange(point, point + len(phrase)))
        np.testing.assert_array_equal(c.tokens[point : point + len(phrase)], phrase)
        assert CLOSE not in c.tokens[:point]
        # The answer follows and uses exactly the budget, then the sample counts as truncated.
        assert c.num_tokens == point + len(phrase) + budget
        assert c.finish_reason == "length"
        assert c.text.count("</think>") == 1
        # Forced tokens carry the model's own log-prob of them (masked from the loss anyway).
        # (The forced </think> is ~-1e4 under the bias, hence a relative tolerance.)
        torch.testing.assert_close(torch.as_tensor(c.logprobs), recompute_logprobs(model, c), rtol=1e-6, atol=1e-5)


def test_answer_ending_in_eos_is_interrupted(tokenizer):
    model = _never_closes()
    phrase_len = len(tokenizer.encode(SamplingParams().interruption_phrase, add_special_tokens=False))
    point = 5
    first_answer = point + phrase_len

    def allow_eos(engine, step):
        # Once the phrase is in, make EOS certain: the answer is one token, EOS.
        if step == first_answer + 1:
            engine.model.lm_head.bias.data[EOS] = 1e4

    params = SamplingParams(max_new_tokens=64, interrupt_range=(point, point), answer_budget=8, seed=0)
    (c,) = TorchEngine(model, tokenizer).generate([[5, 6]], params, on_step=allow_eos)
    assert c.finish_reason == "interrupted"
    assert c.num_tokens == first_answer + 2 and c.tokens[-1] == EOS
    assert c.loss_mask.tolist() == [True] * point + [False] * phrase_len + [True, True]


def test_no_interruption_when_thinking_already_closed(tokenizer):
    model = with_head_bias(make_model(tied=False), {CLOSE: 1e4, EOS: -1e4})  # closes at once
    params = SamplingParams(max_new_tokens=12, interrupt_range=(2, 4), seed=0)
    out = TorchEngine(model, tokenizer).generate(PROMPTS[:4], params)
    for c in out:
        assert c.tokens[0] == CLOSE and c.loss_mask.all()
        assert c.finish_reason == "length" and c.num_tokens == 12


def test_disabled_interruptions_leave_sampling_unchanged(tokenizer):
    model = _never_closes()
    base = SamplingParams(max_new_tokens=16, seed=9)
    plain = TorchEngine(model, tokenizer).generate(PROMPTS[:4], base)
    late = SamplingParams(max_new_tokens=16, seed=9, interrupt_range=(40, 50))  # beyond the cap
    out = TorchEngine(model, tokenizer).generate(PROMPTS[:4], late)
    for a, b in zip(plain, out):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        assert b.loss_mask.all() and b.finish_reason == "length"


def test_with_the_task_tokenizer_and_a_preset_model():
    """The built-in tokenizer spells the phrase with ``</think>`` as one added token."""
    from scalerl.models import build_model, build_task_tokenizer

    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), tokenizer=tokenizer)
    close = tokenizer.convert_tokens_to_ids("</think>")
    with_head_bias(model, {close: -1e4, tokenizer.eos_token_id: -1e4})
    prompt = tokenizer.encode("add 12 34 =")
    params = SamplingParams(max_new_tokens=48, interrupt_range=(6, 6), answer_budget=4, seed=0)
    (c,) = TorchEngine(model, tokenizer).generate([prompt], params)
    phrase = tokenizer.encode(params.interruption_phrase, add_special_tokens=False)
    assert phrase[-1] == close
    assert c.tokens[6 : 6 + len(phrase)].tolist() == phrase
    assert c.num_tokens == 6 + len(phrase) + 4 and c.finish_reason == "length"
    assert "Okay, time is up." in c.text and c.text.count("</think>") == 1
