"""Multi-turn rollouts: the model and an environment take turns, token-exactly.

Per example × G, one environment (``rollout.env``); ``reset(example)`` gives the first prompt,
rendered once by the task's renderer. Then the trajectories advance in lock-step:

1. every live trajectory's ids so far (prompt + sampled + observation ids, never
   re-rendered) go to ONE ``engine.generate`` call: the history is prefilled, the new turn
   decoded. ``on_step`` runs between decode steps whatever the turn, so weights swap in
   flight mid-trajectory and every token keeps the version that sampled it; the engine's
   forced interruption applies to each assistant turn on its own;
2. the turn's sampled ids, behaviour log-probs, versions and loss mask are appended as the
   engine returned them;
3. each environment steps on the turn's text (async ``step`` s concurrently); its
   observation is rendered on its own (``rollout.observation``) and appended with
   ``loss_mask=False``, log-prob 0 and the engine's current version.

A turn ends at an end-of-turn id or one of ``stop_strings`` (a tool call's closing tag).
Limits: ``max_tokens`` bounds the completion (sampled + observation tokens); a turn is
decoded with at most what is left, and one that spends it, or an observation that would pass
it (not appended; one longer than ``max_observation_chars`` is not even tokenized), ends the
episode with ``finish_reason="length"``; so does an episode the
environment has not ended after ``max_turns`` turns. A turn cut by ``max_new_tokens`` (or
by a forced interruption's answer budget) is still the environment's to answer: the episode
ends as ``"length"`` only if that was its last turn. Reward: the sum (``env.reward=sum``) or
the last of the step rewards, ``None`` counted 0.

Failures: every call of the environment (constructor, ``reset``, ``step``, ``close``; one
turn's async steps together) runs under ``env.timeout_s`` on a worker thread
(``scalerl.user_code``). An exception (``BaseException`` included: ``SystemExit``,
``KeyboardInterrupt``), a call past its time limit, a malformed ``step`` answer, or a step
reward that is not a finite real number within float32's range (and a sum that overflows it)
ends its trajectory with reward 0, counted in ``env_errors``; the first failure of each
process is printed once. An environment abandoned at its time limit is not closed (its call
may still be running).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from scalerl.data.tasks.base import REWARD_LIMIT, Example, checked_reward
from scalerl.models.chat import PromptRenderer
from scalerl.rollout.engine import GenerationEngine, OnStep
from scalerl.rollout.env import (
    EnvSpec,
    as_step_result,
    checked_observation,
    maybe_await,
    observation_chars,
)
from scalerl.rollout.observation import ObservationRenderer
from scalerl.rollout.trajectory import Trajectories, check_stop
from scalerl.types import Completion, SamplingParams, Turn
from scalerl.user_code import (
    CallTimedOut,
    TooManyStuck,
    UserCalls,
    UserCodeFailed,
    first_in_run,
    format_failure,
)

_TURN_SEED_STRIDE = 1_000_003  # a fixed-seed call (validation) draws new numbers each turn


@dataclass
class _Episode:
    """One trajectory in progress: its environment, ids so far and per-token records."""

    env: Any
    prompt: list[int] = field(default_factory=list)
    first: Any = ""
    tokens: list[np.ndarray] = field(default_factory=list)
    logprobs: list[np.ndarray] = field(default_factory=list)
    versions: list[np.ndarray] = field(default_factory=list)
    kv_versions: list[np.ndarray] = field(default_factory=list)
    mask: list[np.ndarray] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    length: int = 0
    last_token: str = ""
    """The text of the last sampled token (an end-of-turn marker the observation follows)."""
    finish: str = "stop"
    done: bool = False
    failed: bool = False
    abandoned: bool = False
    """A call of its environment ran past the time limit (it may still be running: never closed)."""

    def ids(self) -> list[int]:
        return self.prompt + [int(t) for part in self.tokens for t in part]

    def append(self, role: str, tokens, logprobs, versions, mask, text: str, kv_versions=None) -> None:
        n = len(tokens)
        self.tokens.append(np.asarray(tokens, dtype=np.int64))
        self.logprobs.append(np.asarray(logprobs, dtype=np.float32))
        self.versions.append(np.asarray(versions, dtype=np.int64))
        self.kv_versions.append(np.asarray(versions if kv_versions is None else kv_versions, dtype=np.int64))
        self.mask.append(np.asarray(mask, dtype=bool))
        self.turns.append(Turn(role, self.length, self.length + n, text))
        self.length += n

    def end(self, finish: str | None = None) -> None:
        self.done = True
        if finish is not None:
            self.finish = finish

    def completion(self) -> Completion:
        def cat(parts, dtype):
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        return Completion(np.asarray(self.prompt, dtype=np.int64), cat(self.tokens, np.int64),
                          cat(self.logprobs, np.float32), cat(self.versions, np.int64), cat(self.mask, bool),
                          self.finish, text="".join(t.text for t in self.turns), turns=tuple(self.turns),
                          kv_versions=cat(self.kv_versions, np.int64))


class MultiTurn:
    """The :class:`~scalerl.rollout.rollout.Rollout` of an environment (module doc)."""

    def __init__(self, renderer: PromptRenderer, env: EnvSpec, log=None) -> None:
        self.renderer, self.spec = renderer, env
        self.factory = env.factory()  # loaded once per process, in every process
        self.observations = ObservationRenderer(renderer.tokenizer, renderer.fmt, env.observation_role)
        self.log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.env_errors = 0  # in this process, for the first traceback only
        self.calls = UserCalls(f"env.name {env.name}", env.timeout_s, "env.timeout_s")

    def run(self, engine: GenerationEngine, examples: Sequence[Example], generations: int,
            params: SamplingParams, *, on_step: OnStep | None = None) -> list[Trajectories]:
        episodes = self._reset([ex for ex in examples for _ in range(generations)])
        if hasattr(engine, "keep_prefixes"):  # each turn prefills only what follows its history's KV
            engine.keep_prefixes()
        for turn in range(self.spec.max_turns):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            self._model_turn(engine, live, params, turn, on_step)
            check_stop(on_step)  # a stop (evaluation on the learner) does not wait for the environments
            self._env_turn(engine, [e for e in live if not e.done], last=turn + 1 == self.spec.max_turns)
        for e in episodes:
            e.end()
            self._close(e)
        out = []
        for i in range(len(examples)):
            members = episodes[i * generations : (i + 1) * generations]
            rewards = np.array([self._reward(e) for e in members], dtype=np.float32)
            out.append(Trajectories([e.completion() for e in members], rewards, members[0].first,
                                    env_errors=sum(e.failed for e in members)))
        return out

    def _reset(self, examples: list[Example]) -> list[_Episode]:
        episodes = [_Episode(self._call(self.spec.build, self.factory)) for _ in examples]
        built = []
        for e, ex in zip(episodes, examples):
            if isinstance(e.env, BaseException):  # the constructor failed: this trajectory's 0
                self._fail(e, e.env)
            else:
                built.append((e, ex))
        firsts = self._awaited([self._call(e.env.reset, asdict(ex)) for e, ex in built])
        for (e, _), first in zip(built, firsts):
            if isinstance(first, BaseException):
                self._fail(e, first)
                continue
            try:
                e.first, e.prompt = first, self.renderer.ids(first)
            except Exception as err:  # noqa: BLE001 - a prompt that is neither text nor messages
                self._fail(e, err)
        return episodes

    def _model_turn(self, engine: GenerationEngine, live: list[_Episode], params: SamplingParams, turn: int,
                    on_step: OnStep | None) -> None:
        """Decode one turn of every live episode in one engine call (budgets cut per row)."""
        budgets = [min(params.max_new_tokens, self.spec.max_tokens - e.length) for e in live]
        for e, b in zip(live, budgets):
            if b < 1:
                e.end("length")
        rows = [(e, b) for e, b in zip(live, budgets) if b >= 1]
        if not rows:
            return
        seed = None if params.seed is None else params.seed + _TURN_SEED_STRIDE * turn
        call = replace(params, max_new_tokens=max(b for _, b in rows), seed=seed,
                       stop_strings=(*params.stop_strings, *self.spec.stop_strings))
        outs = engine.generate([e.ids() for e, _ in rows], call, on_step=on_step)
        tokenizer = self.renderer.tokenizer
        for (e, budget), c in zip(rows, outs):
            n, text = c.num_tokens, c.text
            if n > budget:  # the call's budget is the largest row's: this row's is smaller
                n, text = budget, tokenizer.decode(c.tokens[:budget].tolist(), skip_special_tokens=False)
            kv = c.kv_versions[:n] if c.kv_versions is not None else None
            e.append("model", c.tokens[:n], c.logprobs[:n], c.versions[:n], c.loss_mask[:n], text, kv)
            e.last_token = tokenizer.decode(c.tokens[n - 1 : n].tolist(), skip_special_tokens=False) if n else ""
            e.finish = "length" if n < c.num_tokens else c.finish_reason
            if e.length >= self.spec.max_tokens and e.finish == "length":  # the episode's budget is spent
                e.end()

    def _env_turn(self, engine: GenerationEngine, live: list[_Episode], last: bool) -> None:
        """Step every live episode's environment on its last turn; append the observations."""
        results = self._awaited([self._call(e.env.step, e.turns[-1].text) for e in live])
        for e, result in zip(live, results):
            try:
                if isinstance(result, BaseException):
                    raise result
                step = as_step_result(result)
                e.rewards.append(_step_reward(step.reward))
                if step.done:
                    e.end()
                    continue
                if last:  # the environment wanted more turns than max_turns allows
                    e.end("length")
                    continue
                if step.observation is None:
                    continue
                text, ids = self._observation(e, checked_observation(step.observation))
            except Exception as err:  # noqa: BLE001 - the user's environment: this trajectory's 0
                self._fail(e, err)
                continue
            if ids is None or e.length + len(ids) > self.spec.max_tokens:
                e.end("length")
                continue
            n = len(ids)
            e.append("env", ids, np.zeros(n), np.full(n, engine.version), np.zeros(n, dtype=bool), text)

    def _observation(self, e: _Episode, observation) -> tuple[str, list[int] | None]:
        """An observation's text and ids; None ids (never tokenized) past ``max_observation_chars``."""
        cap = self.spec.max_observation_chars
        if cap is not None and observation_chars(observation) > cap:
            return "", None
        text = self.observations.text(observation, e.last_token)
        return text, self.renderer.tokenizer.encode(text, add_special_tokens=False)

    def _reward(self, e: _Episode) -> float:
        if e.failed or not e.rewards:
            return 0.0
        total = float(sum(e.rewards)) if self.spec.reward == "sum" else e.rewards[-1]
        if abs(total) > REWARD_LIMIT:  # each step's was in range; their sum is not
            self._fail(e, TypeError(f"the step rewards {e.rewards} sum to {total:.3g}, beyond the "
                                    f"±{REWARD_LIMIT:.3g} a reward may be (float32)"))
            return 0.0
        return total

    def _call(self, fn, *args):
        """``fn(*args)`` under the time limit, or the :class:`UserCodeFailed` it ended with (so
        one environment fails alone); too many stuck calls stop the run."""
        try:
            return self.calls.call(fn, *args)
        except TooManyStuck:
            raise
        except UserCodeFailed as err:
            return err

    def _awaited(self, values: list[Any]) -> list[Any]:
        """``values`` with the awaitable ones (async ``reset``/``step``) awaited together, under
        one time limit; past it every one still out is a :class:`CallTimedOut`."""
        if not any(inspect.isawaitable(v) for v in values):
            return values
        out = self._call(maybe_await, values, self.spec.timeout_s)
        if isinstance(out, BaseException):  # the event loop itself hung or died
            return [out if inspect.isawaitable(v) else v for v in values]
        return [CallTimedOut(f"env.name {self.spec.name}: an async call ran past its time limit of "
                             f"{self.spec.timeout_s:g} s (env.timeout_s)") if isinstance(v, TimeoutError) else v
                for v in out]

    def _fail(self, e: _Episode, err: BaseException) -> None:
        e.failed, e.abandoned = True, e.abandoned or isinstance(err, CallTimedOut)
        e.end()
        self.env_errors += 1
        if self.env_errors == 1 and first_in_run(f"env.name {self.spec.name}"):
            self.log(f"env.name {self.spec.name}: an environment failed, and its trajectory scores 0 (counted in "
                     f"env_errors; only this first failure is shown):\n{format_failure(err)}")

    def _close(self, e: _Episode) -> None:
        """``close()`` when the environment has one; its failure is shown, the reward kept."""
        close = getattr(e.env, "close", None)
        if isinstance(e.env, BaseException) or e.abandoned or not callable(close):
            return
        result = self._awaited([self._call(close)])[0]
        if isinstance(result, BaseException):
            self.log(f"env.name {self.spec.name}: close() failed ({result})")


def _step_reward(value) -> float:
    """A step's reward as a float, None counted 0; anything else not a finite real number in
    float32's range is a ``TypeError`` (``data.tasks.base.checked_reward``)."""
    try:
        reward = checked_reward(value)
    except (TypeError, OverflowError) as err:
        raise TypeError(f"step() reward: {err}") from None
    return 0.0 if reward is None else reward
