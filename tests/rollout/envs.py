"""Scripted environments for the multi-turn tests, loaded as ``envs.py:NAME`` plug-ins."""

from __future__ import annotations

from scalerl.rollout.env import StepResult

OBSERVATION = "w5 w6 w7"


class Scripted:
    """Answers ``turns - 1`` turns with a fixed observation (reward 0.25 each), ends the
    ``turns``-th with reward 1; remembers what it was given."""

    def __init__(self, turns: int = 3, prompt: str = "w3 w4") -> None:
        self.turns, self.prompt, self.actions = turns, prompt, []

    def reset(self, example: dict) -> str:
        self.example = example
        return self.prompt

    def step(self, action: str) -> StepResult:
        self.actions.append(action)
        if len(self.actions) >= self.turns:
            return StepResult(None, 1.0, True)
        return StepResult(OBSERVATION, 0.25, False)


class AsyncScripted(Scripted):
    """The same, with ``async`` methods and plain tuples."""

    async def reset(self, example: dict) -> str:
        return Scripted.reset(self, example)

    async def step(self, action: str):
        return tuple(Scripted.step(self, action))


class FailsOnSecondStep(Scripted):
    def step(self, action: str) -> StepResult:
        if self.actions:
            raise RuntimeError("the tool crashed")
        return Scripted.step(self, action)


class NeverDone(Scripted):
    def step(self, action: str) -> StepResult:
        self.actions.append(action)
        return StepResult(OBSERVATION, 1.0, False)


class NoStep:
    def reset(self, example: dict) -> str:
        return "w3"


class BadReward(Scripted):
    """Scripted, but each step's reward is ``reward`` (a knob): inf, NaN, a string, 1e308 ..."""

    def __init__(self, reward=float("inf"), **kw) -> None:
        super().__init__(**kw)
        self.reward = reward

    def step(self, action: str) -> StepResult:
        result = Scripted.step(self, action)
        return StepResult(result.observation, self.reward, result.done)


class BadObservation(Scripted):
    """Scripted, but each observation is ``observation`` (a knob): a dict, an empty list ..."""

    def __init__(self, observation=None, **kw) -> None:
        super().__init__(**kw)
        self.observation = observation

    def step(self, action: str) -> StepResult:
        result = Scripted.step(self, action)
        return StepResult(self.observation if not result.done else None, result.reward, result.done)


class Exits(Scripted):
    """``step`` raises ``SystemExit`` (user code calling ``sys.exit``)."""

    def step(self, action: str) -> StepResult:
        raise SystemExit(0)


class Hangs(Scripted):
    """``step`` blocks until the class's event is set (the test releases it)."""

    import threading

    release = threading.Event()

    def step(self, action: str) -> StepResult:
        Hangs.release.wait()
        return StepResult(None, 1.0, True)


class AsyncHangs(Scripted):
    """An async ``step`` that never ends (cooperatively)."""

    async def step(self, action: str):
        import asyncio

        await asyncio.Event().wait()
