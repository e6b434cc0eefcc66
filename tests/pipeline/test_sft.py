import json

import pytest
import torch

from scalerl.data.tasks import get_task
from scalerl.models import build_model, build_task_tokenizer, load_pretrained
from scalerl.pipeline.sft import (
    SFTSpec,
    encode_demonstrations,
    engine_pass_rate,
    generate_pass_rate,
    sft_warmup,
)
from scalerl.types import SamplingParams


@pytest.fixture(scope="module")
def tok():
    return build_task_tokenizer()


def test_loss_covers_completion_and_eos_only(tok):
    ids, attn, labels = encode_demonstrations(tok, ["add 1+2 =", "add 10+20 ="],
                                              ["<think> x </think> 3", "</think> 30"])
    prompt0 = len(tok("add 1+2 =").input_ids)
    completion0 = len(tok("<think> x </think> 3", add_special_tokens=False).input_ids) + 1
    assert (labels[0, :prompt0] == -100).all()
    assert (labels[0, prompt0:prompt0 + completion0] == ids[0, prompt0:prompt0 + completion0]).all()
    assert labels[0, prompt0 + completion0 - 1] == tok.eos_token_id
    # Row 1 is shorter: its right padding is masked from both attention and loss.
    assert attn[1].sum() < attn.shape[1] and (labels[1][attn[1] == 0] == -100).all()


class Scripted:
    """A pass-rate probe that replays fixed numbers (probe and confirmation sizes differ)."""

    def __init__(self, probes, confirms):
        self.probes, self.confirms, self.calls = list(probes), list(confirms), []

    def __call__(self, model, tokenizer, task, num_prompts):
        self.calls.append(num_prompts)
        return (self.probes if num_prompts == 8 else self.confirms).pop(0)


def test_overshoot_rolls_back_and_band_needs_confirmation(tok):
    task = get_task("addition", max_digits=2)
    model = build_model("nano", len(tok), tokenizer=tok)
    # Probes every 4 steps: 0.0, then 0.9 (overshoot: roll back), then 0.3 (in band) which the
    # larger confirmation measures at 0.05 (below): keep going; then 0.2 confirmed at 0.25.
    fake = Scripted(probes=[0.0, 0.9, 0.3, 0.2], confirms=[0.05, 0.25])
    res = sft_warmup(task, model, tok, SFTSpec((0.1, 0.4), max_steps=100, probe_every=4, probe_size=8,
                                               final_eval_size=16, batch_size=4), pass_rate_fn=fake)
    assert [r["pass_rate"] for r in res.history] == [0.0, 0.9, 0.3, 0.2]
    assert [r["confirmed_pass_rate"] for r in res.history] == [None, None, 0.05, 0.25]
    # Past lo / 2 the cadence is probe_every // 4; the overshoot halves probe_every to 2,
    # so from step 8 on it probes every max(1, 2 // 4) = 1 step.
    assert [r["step"] for r in res.history] == [4, 8, 9, 10]
    assert res.reached_band and res.pass_rate == 0.25 and fake.calls == [8, 8, 8, 16, 8, 16]


def test_generate_probe_scores_a_model(tok):
    task = get_task("addition", max_digits=2, num_validation=4)
    model = build_model("nano", len(tok), tokenizer=tok)
    assert generate_pass_rate(model, tok, task, 4) == 0.0  # untrained: random tokens


def test_bad_band_is_rejected(tok):
    with pytest.raises(ValueError, match="target_band"):
        sft_warmup(get_task("addition"), build_model("nano", len(tok)), tok, SFTSpec((0.5, 0.2), max_steps=10))


# 140 s on two shared cores; make test's warm model (tests/conftest.py) runs the same warm-up on
# small additions to its band and saves it, so this one runs with make test-slow
@pytest.mark.slow
def test_reaches_the_starting_band_on_the_default_task_and_saves(tok, tmp_path):
    # A step budget, not a wall-clock one: with max_seconds=inf the run is a function of the
    # step count alone, so a busy machine makes it slower, never different. It reached the
    # band at step 192 (~30 s on an idle core); 1000 steps is the generous bound. How long
    # the warm-up takes is a speed figure, not a test.
    task = get_task("addition")
    model = build_model("nano", len(tok), tokenizer=tok, seed=0)
    res = sft_warmup(task, model, tok, SFTSpec((0.1, 0.4), max_steps=1000), output_dir=tmp_path / "sft")
    assert res.reached_band, res.history[-3:]
    assert 0.1 <= res.pass_rate <= 0.4 and res.steps < 1000 and res.seconds > 0
    saved = json.loads((tmp_path / "sft" / "sft_result.json").read_text())
    assert saved["pass_rate"] == res.pass_rate
    # The probe samples as told: 4 new tokens cannot hold a thinking block and an answer.
    assert engine_pass_rate(model, tok, task, 50, params=SamplingParams(max_new_tokens=4)) == 0.0
    again, tok2 = load_pretrained(tmp_path / "sft")
    ids = tok2(["add 12+7 ="], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)


def test_an_episode_in_pieces_trains_on_the_model_turns_only(tok):
    """A multi-turn demonstration: the environment's observation is encoded on its own and
    left out of the loss, as a rollout appends it."""
    pieces = [("<calc>3*4</calc>", True), ("<result>12</result>", False), (" 12", True)]
    ids, attn, labels = encode_demonstrations(tok, ["mul 3*4 ="], [pieces])
    lengths = [len(tok("mul 3*4 =").input_ids)] + [len(tok(t, add_special_tokens=False).input_ids) for t, _ in pieces]
    starts = [sum(lengths[:i]) for i in range(len(lengths) + 1)]
    assert (labels[0, : starts[1]] == -100).all() and (labels[0, starts[2] : starts[3]] == -100).all()
    assert (labels[0, starts[1] : starts[2]] == ids[0, starts[1] : starts[2]]).all()
    assert (labels[0, starts[3] : starts[4] + 1] == ids[0, starts[3] : starts[4] + 1]).all()  # + EOS
    assert labels[0, starts[4]] == tok.eos_token_id


def _hog(seconds: float):
    """A process that keeps one core busy, as other work on a shared machine does."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"])


def test_the_same_config_and_seed_give_the_same_warm_model_on_a_busy_machine(tok):
    """Probe 12: bounded by seconds, a warm-up on a busy machine (load 11) ended outside its band
    and the run was refused. Bounded by steps, it gives the same weights whatever else runs."""
    task = get_task("addition", max_digits=2)
    spec = SFTSpec((0.9, 1.0), max_steps=12, probe_every=6, probe_size=8, final_eval_size=8, batch_size=8)
    runs = []
    for busy in (False, True):
        torch.manual_seed(0)
        model = build_model("nano", len(tok), tokenizer=tok, seed=0)
        hog = _hog(120.0) if busy else None
        try:
            res = sft_warmup(task, model, tok, spec)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        runs.append((res, {k: v.clone() for k, v in model.state_dict().items()}))
    (quiet, a), (busy, b) = runs
    assert quiet.steps == busy.steps == 12 and not quiet.timed_out and not busy.timed_out
    assert [r["pass_rate"] for r in quiet.history] == [r["pass_rate"] for r in busy.history]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_seconds_are_a_safety_net_that_says_so(tok):
    res = sft_warmup(get_task("addition", max_digits=2), build_model("nano", len(tok), tokenizer=tok),
                     tok, SFTSpec((0.9, 1.0), max_steps=10_000, max_seconds=1e-9, final_eval_size=4))
    assert res.timed_out and res.steps == 0
