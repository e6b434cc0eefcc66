"""Multi-turn rollouts: token-exact trajectories, limits, rewards and environment failures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from scalerl.data.tasks.base import Example
from scalerl.models.chat import ChatFormat
from scalerl.rollout.env import EnvSpec
from scalerl.rollout.rollout import build_rollout
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import SamplingParams

from .envs import OBSERVATION
from .tiny import make_model, recompute_logprobs, with_head_bias

ENVS = Path(__file__).with_name("envs.py")
PARAMS = SamplingParams(max_new_tokens=16, seed=1)
EXAMPLE = Example(0, "p", "1")

# Like Qwen3's (which drops earlier think blocks), this template renders an assistant turn
# differently once it is no longer the last: re-rendering a history changes its ids.
DROPS_EARLIER_TURNS = (
    "{% for m in messages %}w1 {{ m['role'] }} {% if m['role'] == 'assistant' and not loop.last %}w2"
    "{% else %}{{ m['content'] }}{% endif %} <eos> {% endfor %}{% if add_generation_prompt %}w1 assistant {% endif %}"
)


def env(name: str = "Scripted", **kw) -> EnvSpec:
    settings = {"knobs": {}, "max_turns": 4, "max_tokens": 200, "reward": "sum", "observation_role": "tool"} | kw
    return EnvSpec(f"{ENVS}:{name}", **settings)


@pytest.fixture
def eos_model():
    """A tiny model that ends a turn with EOS after a few tokens (so an episode has 3 turns)."""
    return with_head_bias(make_model(tied=False), {1: 4.0})


class Spy:
    """An engine wrapper that keeps what every ``generate`` call returned."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, params, on_step=None):
        out = self.engine.generate(prompts, params, on_step=on_step)
        self.calls.append((prompts, out))
        return out


@pytest.mark.parametrize("template", [None, DROPS_EARLIER_TURNS])
def test_three_turn_trajectory_scores_exactly_the_sampled_ids(eos_model, tokenizer, template):
    """The learner's recompute equals the generator's log-prob on every sampled token of a
    3-turn trajectory (1e-5), observations are masked, and the trajectory holds the ids the
    engine sampled even where the template's re-rendering of the history differs."""
    tokenizer.chat_template = template
    chat = ChatFormat("none" if template is None else "auto")
    spy = Spy(TorchEngine(eos_model, tokenizer))
    [group] = build_rollout(None, tokenizer, chat, env()).run(spy, [EXAMPLE], 3, PARAMS)
    assert len(spy.calls) == 3  # one engine call per turn, for the whole group
    for row, c in enumerate(group.completions):
        assert [t.role for t in c.turns] == ["model", "env", "model", "env", "model"]
        sampled = torch.as_tensor(c.loss_mask)
        gap = (recompute_logprobs(eos_model, c) - torch.as_tensor(c.logprobs)).abs()[sampled]
        assert float(gap.max()) < 1e-5
        for turn, (prompts, out) in zip(c.turns[::2], spy.calls):  # each model turn is what the engine sampled
            assert c.tokens[turn.start : turn.end].tolist() == out[row].tokens.tolist()
            assert prompts[row] == c.prompt_tokens.tolist() + c.tokens[: turn.start].tolist()
        for turn in c.turns[1::2]:  # observations: out of the loss, the env's text on its own
            assert not c.loss_mask[turn.start : turn.end].any() and OBSERVATION in turn.text
            assert c.tokens[turn.start : turn.end].tolist() == tokenizer.encode(turn.text, add_special_tokens=False)
        assert c.env_tokens == sum(t.end - t.start for t in c.turns[1::2]) and c.model_turns == 3
    if template is not None:  # what re-rendering the conversation would have scored instead
        c = group.completions[0]
        messages = [{"role": "user", "content": "w3 w4"}]
        for t in c.turns[:-1]:
            messages.append({"role": "assistant" if t.role == "model" else "tool",
                             "content": t.text if t.role == "model" else OBSERVATION})
        again = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True)
        ids = tokenizer.encode(again, add_special_tokens=False)
        assert ids != c.prompt_tokens.tolist() + c.tokens[: c.turns[-1].start].tolist()
    assert group.rewards.tolist() == [1.5, 1.5, 1.5]  # 0.25 + 0.25 + 1


@pytest.mark.parametrize("name", ["Scripted", "AsyncScripted"])
def test_reward_is_the_sum_or_the_last_step_reward(eos_model, tokenizer, name):
    engine = TorchEngine(eos_model, tokenizer)
    for form, expected in (("sum", 1.5), ("last", 1.0)):
        [group] = build_rollout(None, tokenizer, ChatFormat("none"), env(name, reward=form)).run(
            engine, [EXAMPLE], 2, PARAMS)
        assert group.rewards.tolist() == [expected, expected] and group.env_errors == 0


def test_an_environment_failure_scores_zero_and_is_counted_once(eos_model, tokenizer):
    said = []
    rollout = build_rollout(None, tokenizer, ChatFormat("none"), env("FailsOnSecondStep"), log=said.append)
    [group] = rollout.run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 3, PARAMS)
    assert group.env_errors == 3 and group.rewards.tolist() == [0.0, 0.0, 0.0]
    assert all([t.role for t in c.turns] == ["model", "env", "model"] for c in group.completions)
    assert len(said) == 1 and "the tool crashed" in said[0]  # the first traceback, once


def test_turn_and_token_limits_end_the_episode_as_length(eos_model, tokenizer):
    engine = TorchEngine(eos_model, tokenizer)
    [group] = build_rollout(None, tokenizer, ChatFormat("none"), env("NeverDone", max_turns=2)).run(
        engine, [EXAMPLE], 3, PARAMS)
    assert all(c.finish_reason == "length" and c.model_turns == 2 for c in group.completions)
    [group] = build_rollout(None, tokenizer, ChatFormat("none"), env("NeverDone", max_tokens=9)).run(
        engine, [EXAMPLE], 4, PARAMS)
    for c in group.completions:
        assert c.finish_reason == "length" and c.num_tokens <= 9
        assert len(c.tokens) == len(c.logprobs) == len(c.versions) == len(c.loss_mask)
    assert np.all(group.rewards >= 0)
    # a turn cut by max_new_tokens is still the environment's to answer; the last one's cut shows
    never_stops = TorchEngine(eos_model, tokenizer, eos_token_ids=())
    [group] = build_rollout(None, tokenizer, ChatFormat("none"), env()).run(
        never_stops, [EXAMPLE], 2, SamplingParams(max_new_tokens=2, seed=1))
    for c in group.completions:
        assert c.model_turns == 3 and c.finish_reason == "length" and c.num_tokens == 3 * 2 + 2 * 3


def test_weights_swapped_mid_trajectory_stamp_each_token_and_the_lag_bound_holds(tokenizer):
    """Swap the LM head at decode step 2 of the second turn: every token keeps the version
    that sampled it (observations the one held when they were appended), each scores
    exactly under its own weights, and the group's staleness counts the oldest token."""
    from scalerl.pipeline.queues import LagPolicy, staleness
    from scalerl.types import Group

    old = with_head_bias(make_model(tied=False), {1: 4.0})
    new = with_head_bias(make_model(tied=False), {1: 4.0})
    with torch.no_grad():
        new.lm_head.weight.normal_(0.0, 0.3)
    spy = Spy(TorchEngine(with_head_bias(make_model(tied=False), {1: 4.0}), tokenizer))

    def on_step(engine, step):  # the learner publishes while turn 2 is being decoded
        if len(spy.calls) == 1 and step == 2 and engine.version == 0:
            engine.update_weights({"lm_head.weight": new.lm_head.weight}, 1)

    [group] = build_rollout(None, tokenizer, ChatFormat("none"), env()).run(spy, [EXAMPLE], 3, PARAMS,
                                                                            on_step=on_step)
    assert spy.engine.version == 1
    for c in group.completions:
        second = c.turns[2]  # turn 1 and its observation, then turn 2's first two tokens: version 0
        cut = min(second.start + 2, second.end)
        assert c.versions.tolist() == [0] * cut + [1] * (c.num_tokens - cut)
        sampled = torch.as_tensor(c.loss_mask)
        for model, version in ((old, 0), (new, 1)):  # the body is unchanged: the KV cache stays exact
            mine = sampled & torch.as_tensor(c.versions == version)
            gap = (recompute_logprobs(model, c) - torch.as_tensor(c.logprobs)).abs()[mine]
            assert float(gap.max()) < 1e-5
    # mid-turn, not only between turns: a second turn holds tokens of both versions
    assert any(set(c.versions[c.turns[2].start : c.turns[2].end].tolist()) == {0, 1} for c in group.completions)
    scored = Group(0, group.completions, group.rewards, start_version=0)
    assert scored.oldest_version == 0 and staleness(scored, 1) == 1
    policy = LagPolicy("pipeline-rl", 1, 1)
    assert policy.admits(scored, learner_version=1) and not policy.admits(scored, learner_version=2)


@pytest.mark.parametrize("reward", [float("inf"), float("nan"), "1", True, 1e39])
def test_a_step_reward_that_is_no_finite_float32_number_is_an_error(eos_model, tokenizer, reward):
    """inf must not pass every threshold, NaN must not silently drop the sample, a string is no
    number, and 1e39 is inf as float32: each scores 0, counted in env_errors, said once."""
    said = []
    rollout = build_rollout(None, tokenizer, ChatFormat("none"), env("BadReward", knobs={"reward": reward}),
                            log=said.append)
    [group] = rollout.run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 3, PARAMS)
    assert group.env_errors == 3 and group.rewards.tolist() == [0.0, 0.0, 0.0]
    assert len(said) == 1 and "reward" in said[0]


@pytest.mark.parametrize("template", [None, DROPS_EARLIER_TURNS])
@pytest.mark.parametrize("observation, kind", [({"result": "w5"}, "a dict"), ([], "an empty list"),
                                               ([{"role": "tool"}], "a list whose items are not all")])
def test_an_observation_that_is_no_text_or_messages_is_said_so(eos_model, tokenizer, template, observation, kind):
    """Not a chat template's failure (the reason given before): what step() returned."""
    tokenizer.chat_template = template
    said = []
    rollout = build_rollout(None, tokenizer, ChatFormat("none" if template is None else "auto"),
                            env("BadObservation", knobs={"observation": observation}), log=said.append)
    [group] = rollout.run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 2, PARAMS)
    assert group.env_errors == 2 and group.rewards.tolist() == [0.0, 0.0]
    assert len(said) == 1 and f"step() returned an observation that is {kind}" in said[0], said
    assert "template" not in said[0]


@pytest.mark.parametrize("observation", ["w5 w6 w7 " * 3, [{"role": "tool", "content": "w5 w6 w7 " * 3}]])
def test_an_observation_longer_than_max_observation_chars_ends_the_episode_untokenized(
        eos_model, tokenizer, observation):
    """27 characters (9 tokens, well within max_tokens) against a cap of 26: never tokenized."""
    tokenizer.chat_template = None if isinstance(observation, str) else DROPS_EARLIER_TURNS
    encoded = []
    real = tokenizer.encode
    tokenizer.encode = lambda text, **kw: encoded.append(text) or real(text, **kw)
    spec = env("BadObservation", knobs={"observation": observation}, max_observation_chars=26)
    chat = ChatFormat("none" if isinstance(observation, str) else "auto")
    [group] = build_rollout(None, tokenizer, chat, spec).run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 2, PARAMS)
    assert group.env_errors == 0
    assert all(c.finish_reason == "length" and [t.role for t in c.turns] == ["model"] for c in group.completions)
    assert not any("w5 w6 w7 w5" in text for text in encoded)
    spec = env("BadObservation", knobs={"observation": observation}, max_observation_chars=27)
    [group] = build_rollout(None, tokenizer, chat, spec).run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 2, PARAMS)
    assert all([t.role for t in c.turns][:2] == ["model", "env"] for c in group.completions)  # at the cap: appended


def test_step_rewards_whose_sum_overflows_are_an_error(eos_model, tokenizer):
    said = []
    rollout = build_rollout(None, tokenizer, ChatFormat("none"),
                            env("BadReward", knobs={"reward": 3e38, "turns": 2}), log=said.append)
    [group] = rollout.run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 2, PARAMS)
    assert group.env_errors == 2 and group.rewards.tolist() == [0.0, 0.0]
    assert len(said) == 1 and "sum to" in said[0]


def test_system_exit_in_step_is_contained(eos_model, tokenizer):
    said = []
    rollout = build_rollout(None, tokenizer, ChatFormat("none"), env("Exits", timeout_s=30.0), log=said.append)
    [group] = rollout.run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 2, PARAMS)
    assert group.env_errors == 2 and group.rewards.tolist() == [0.0, 0.0]
    assert len(said) == 1 and "SystemExit" in said[0]


@pytest.mark.parametrize("name", ["Hangs", "AsyncHangs"])
def test_a_hung_step_is_abandoned_at_env_timeout_s(eos_model, tokenizer, name):
    from .envs import Hangs

    said = []
    rollout = build_rollout(None, tokenizer, ChatFormat("none"), env(name, timeout_s=0.2), log=said.append)
    try:
        [group] = rollout.run(TorchEngine(eos_model, tokenizer), [EXAMPLE], 2, PARAMS)
    finally:
        Hangs.release.set()
    assert group.env_errors == 2 and group.rewards.tolist() == [0.0, 0.0]
    assert len(said) == 1 and "time limit of 0.2 s (env.timeout_s)" in said[0]
