"""Code task: (problem, tests) records; the policy's program is scored in the sandbox.

Like the paper's code runs (digest §2.1, Deepcoder with a custom execution environment), the
program is executed against unit tests and expected outputs, never in the trainer's process
(``scalerl.data.sandbox``). Tests come in one of three shapes (or a JSON string of one):

- ``[{"input": "...", "output": "..."}, ...]``: stdin/stdout cases, one sandboxed run each,
  run in parallel and compared by the trainer (trailing whitespace per line ignored);
- ``{"inputs": [...], "outputs": [...]}``: the same, APPS-style;
- ``["assert f(1) == 2", ...]``: function tests. Each is parsed here into a call and an
  expected value (``scalerl.data.asserts``); the sandbox makes only the calls and returns
  plain data, and the trainer compares. A snippet of another form is an error at load.

The reward is the fraction of tests passed (``all_tests=True``: 1.0 only if all pass). The
program is the last fenced code block after the last ``</think>`` (the whole text there if
there is no fence).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import re
import sys
from pathlib import Path

from scalerl.data.asserts import AssertFormError, parse_assert
from scalerl.data.results import CostError, Meter, shorten
from scalerl.data.sandbox import DEFAULT_LIMITS, SandboxLimits, run_cases, run_python
from scalerl.data.sandbox.ns import isolation
from scalerl.data.sandbox.uids import pool_warning
from scalerl.data.tasks.base import Example, RewardFn, strip_thinking
from scalerl.data.tasks.records import FileTask, prompt_field

DEFAULT_PROMPT = (
    "Write a Python program for the problem. Think inside <think> </think>, then give the "
    "program in a ```python code block.\n\nProblem: {problem}\n"
)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*\n(.*?)```", re.DOTALL)


def extract_program(completion_text: str) -> str:
    """The last fenced code block of the solution part, else the solution part itself."""
    solution = strip_thinking(completion_text)
    blocks = _FENCE.findall(solution)
    return blocks[-1] if blocks else solution


def normalize_tests(tests, where: str = "tests") -> dict:
    """``{"kind": "io", "cases": [(stdin, stdout), ...]}`` or ``{"kind": "calls", "cases":
    [Check, ...]}``; a ValueError naming ``where`` and the test if they cannot be graded."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: tests are a string but not valid JSON ({e.msg})") from None
    if isinstance(tests, dict) and {"inputs", "outputs"} <= set(tests):
        return {"kind": "io", "cases": [(str(i), str(o)) for i, o in
                                         zip(tests["inputs"], tests["outputs"], strict=True)]}
    if isinstance(tests, list) and tests and all(isinstance(t, dict) for t in tests):
        if not all({"input", "output"} <= set(t) for t in tests):
            raise ValueError(f"{where}: every stdin/stdout test needs 'input' and 'output'")
        return {"kind": "io", "cases": [(str(t["input"]), str(t["output"])) for t in tests]}
    if isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        checks = []
        for j, snippet in enumerate(tests):
            try:
                checks.append(parse_assert(snippet))
            except AssertFormError as e:
                raise ValueError(f"{where}: test {j} ({snippet.strip()[:60]!r}): {e}") from None
        return {"kind": "calls", "cases": checks}
    raise ValueError(
        f"{where}: tests must be a non-empty list of {{input, output}} cases, "
        "{inputs, outputs} lists, or assert snippets"
    )


def _same_output(got: str, want: str) -> bool:
    def norm(s: str) -> list[str]:
        lines = [line.rstrip() for line in s.strip("\n").splitlines()]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    return norm(got) == norm(want)


def grade(program: str, tests: dict, limits: SandboxLimits = DEFAULT_LIMITS) -> tuple[list[bool], str | None]:
    """Per-test pass/fail of ``program`` on normalized ``tests``, compared here, never in the
    sandbox; and, if a run's results channel broke its grammar or its values cost more than
    ``results.COMPARE_CPU_S`` of trainer CPU to compare, why (its tests then fail).
    Function tests share one run; stdin/stdout cases run in parallel in one budget."""
    if tests["kind"] == "calls":
        checks = tests["cases"]
        r = run_python(program, calls=[[c.func, c.args_src, c.kwargs_src, c.wrap] for c in checks], limits=limits)
        if r.error is not None:
            return [False] * len(checks), r.error
        meter = Meter()  # one CPU budget for comparing all of this completion's values
        try:  # values reported before any timeout count
            return [ok and c.passes(v, meter) for c, (ok, v) in zip(checks, r.values)], None
        except CostError as e:
            return [False] * len(checks), str(e)
    runs = run_cases(program, [stdin for stdin, _ in tests["cases"]], limits)
    error = next((r.error for r in runs if r is not None and r.error is not None), None)
    return [r is not None and r.error is None and r.finished and _same_output(r.stdout, want)
            for r, (_, want) in zip(runs, tests["cases"])], error


def run_tests(program: str, tests: dict, limits: SandboxLimits = DEFAULT_LIMITS) -> list[bool]:
    """Per-test pass/fail of ``program`` on normalized ``tests`` (:func:`grade`)."""
    return grade(program, tests, limits)[0]


def score(completion_text: str, example: Example, *, all_tests: bool = False,
          limits: SandboxLimits = DEFAULT_LIMITS) -> tuple[float, str | None]:
    """:func:`code_reward` and why the completion's results were malformed, if they were."""
    program = extract_program(completion_text)
    if not program.strip():
        return 0.0, None
    passed, error = grade(program, example.meta["tests"], limits)
    if all_tests:
        return float(all(passed)), error
    return sum(passed) / len(passed), error


def code_reward(completion_text: str, example: Example, *, all_tests: bool = False,
                limits: SandboxLimits = DEFAULT_LIMITS) -> float:
    """Fraction of ``example.meta["tests"]`` passed (or 1.0/0.0 if ``all_tests``)."""
    return score(completion_text, example, all_tests=all_tests, limits=limits)[0]


ANNOUNCED = "SCALERL_SANDBOX_ANNOUNCED"
"""Set to the pid of the process that named the sandbox's layer; the generator processes it
spawns inherit it and stay quiet."""


@functools.cache
def _announce_isolation() -> None:
    """Name the sandbox's strongest layer (and a refused uid pool) once per run, in the run's log.

    The process that builds the task first says it; the generators it then spawns are
    multiprocessing children of an announcer and say nothing. A ``scalerl train`` that a sweep
    starts is no multiprocessing child, so each run's own log still has the line; a Ray
    worker inherits no environment, so on ``ray`` each worker says it once more."""
    parent = multiprocessing.parent_process()
    if parent is not None and os.environ.get(ANNOUNCED) == str(parent.pid):
        return
    for line in isolation_lines():
        print(line, file=sys.stderr, flush=True)
    os.environ[ANNOUNCED] = str(os.getpid())


def isolation_lines() -> list[str]:
    """The run log's lines on the sandbox: its strongest layer, then, where programs would run
    as pool uids but the pool is refused (``sandbox.uids``), one warning sentence."""
    layer = isolation()
    uses_pool = not (layer.namespaces and layer.user_namespace)
    warning = pool_warning() if uses_pool else None
    return [layer.describe(), *([warning] if warning else [])]


def sandbox_limits(limits: SandboxLimits | dict | None) -> SandboxLimits:
    """``limits`` as given in code, or the ``task.knobs.limits`` mapping of a recipe (each
    field a positive number, or for ``namespaces`` / ``audit_hook`` a boolean)."""
    if isinstance(limits, SandboxLimits):
        return limits
    if limits is not None and not isinstance(limits, dict):
        raise ValueError(f"task.knobs.limits must be a mapping of sandbox limits; got {limits!r}")
    fields = SandboxLimits.__dataclass_fields__
    unknown = set(limits or {}) - set(fields)
    if unknown:
        raise ValueError(f"task.knobs.limits: unknown field(s) {sorted(unknown)}; known: {sorted(fields)}")
    for name, value in (limits or {}).items():
        default = fields[name].default
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        else:
            number = int if isinstance(default, int) else (int, float)
            ok = isinstance(value, number) and not isinstance(value, bool) and (value > 0 or name == "parallel" and value == 0)
        if not ok:
            want = "true or false" if isinstance(default, bool) else (
                "a positive integer" if isinstance(default, int) else "a positive number")
            raise ValueError(f"task.knobs.limits.{name} must be {want}; got {value!r}")
    return SandboxLimits(**(limits or {}))


class CodeTask(FileTask):
    """Programming problems from a local file, scored by sandboxed unit tests."""

    name = "code"

    def __init__(
        self,
        path: str | Path,
        *,
        problem_field: str = "problem",
        tests_field: str = "tests",
        solution_field: str | None = None,
        validation_path: str | Path | None = None,
        num_validation: int = 100,
        prompt_template: str = DEFAULT_PROMPT,
        all_tests: bool = False,
        limits: SandboxLimits | dict = DEFAULT_LIMITS,
        seed: int = 0,
        reward_fn: RewardFn | None = None,
    ) -> None:
        fields = [problem_field, tests_field] + ([solution_field] if solution_field else [])

        def to_example(i: int, rec: dict, where: str) -> Example:
            problem, meta = prompt_field(rec, problem_field, where)
            meta["tests"] = normalize_tests(rec[tests_field], where)
            if solution_field:
                meta["solution"] = str(rec[solution_field])
            return Example(id=i, problem=problem, answer="", meta=meta)

        super().__init__(path, fields, to_example, validation_path=validation_path,
                         num_validation=num_validation, seed=seed, prompt_template=prompt_template)
        self.all_tests, self.limits = all_tests, sandbox_limits(limits)
        self.reward_errors = 0
        """Completions whose results channel was malformed (scored 0); the actor reports it."""
        if reward_fn is None:
            _announce_isolation()
        self.reward_fn = reward_fn

    def reward(self, completion_text: str, example: Example) -> float:
        if self.reward_fn is not None:
            return float(self.reward_fn(completion_text, example))
        value, error = score(completion_text, example, all_tests=self.all_tests, limits=self.limits)
        if error is not None:
            self.reward_errors += 1
            if self.reward_errors == 1:  # once: a policy that found the trick repeats it
                print(f"code task: a completion wrote malformed results, or results too costly to compare, "
                      f"and scored 0 ({shorten(error)}); "
                      "further cases are counted in the reward_errors metric", file=sys.stderr, flush=True)
        return value

    def demonstration(self, example: Example) -> str:
        """The reference solution (``solution_field``) as a fenced block after empty thinking."""
        if "solution" not in example.meta:
            raise ValueError("this code task has no solution_field, so it has no demonstrations")
        return f"<think> </think>\n```python\n{example.meta['solution']}\n```"
