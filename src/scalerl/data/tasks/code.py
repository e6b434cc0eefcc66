"""Code task: (problem, tests) records; the policy's program is scored in the sandbox.

Like the paper's code runs (digest §2.1, Deepcoder with a custom execution environment), the
program is executed against unit tests and expected outputs, never in the trainer's process
(``scalerl.data.sandbox``). Tests come in one of three shapes (or a JSON string of one):

- ``[{"input": "...", "output": "..."}, ...]``: stdin/stdout cases, one sandboxed run each,
  compared by the trainer (trailing whitespace per line ignored);
- ``{"inputs": [...], "outputs": [...]}``: the same, APPS-style;
- ``["assert f(1) == 2", ...]``: snippets run after the program in its namespace.

The reward is the fraction of tests passed (``all_tests=True``: 1.0 only if all pass). The
program is the last fenced code block after the last ``</think>`` (the whole text there if
there is no fence).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from scalerl.data.sandbox import DEFAULT_LIMITS, SandboxLimits, run_python
from scalerl.data.tasks.base import Example, RewardFn, strip_thinking
from scalerl.data.tasks.records import FileTask

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
    """``{"kind": "io", "cases": [(stdin, stdout), ...]}`` or ``{"kind": "asserts", ...}``."""
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
        return {"kind": "asserts", "cases": list(tests)}
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


def run_tests(program: str, tests: dict, limits: SandboxLimits = DEFAULT_LIMITS) -> list[bool]:
    """Per-test pass/fail of ``program`` on normalized ``tests``, each run sandboxed."""
    if tests["kind"] == "asserts":
        r = run_python(program, tests=tests["cases"], mode="asserts", limits=limits)
        return r.results if r.reported else [False] * len(tests["cases"])
    out = []
    for stdin, want in tests["cases"]:
        r = run_python(program, stdin=stdin, mode="io", limits=limits)
        out.append(r.reported and r.loaded and _same_output(r.stdout, want))
    return out


def code_reward(completion_text: str, example: Example, *, all_tests: bool = False,
                limits: SandboxLimits = DEFAULT_LIMITS) -> float:
    """Fraction of ``example.meta["tests"]`` passed (or 1.0/0.0 if ``all_tests``)."""
    program = extract_program(completion_text)
    if not program.strip():
        return 0.0
    passed = run_tests(program, example.meta["tests"], limits)
    if all_tests:
        return float(all(passed))
    return sum(passed) / len(passed)


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
        limits: SandboxLimits = DEFAULT_LIMITS,
        seed: int = 0,
        reward_fn: RewardFn | None = None,
    ) -> None:
        fields = [problem_field, tests_field] + ([solution_field] if solution_field else [])

        def to_example(i: int, rec: dict, file) -> Example:
            meta = {"tests": normalize_tests(rec[tests_field], f"{file} record {i}")}
            if solution_field:
                meta["solution"] = str(rec[solution_field])
            return Example(id=i, problem=str(rec[problem_field]), answer="", meta=meta)

        super().__init__(path, fields, to_example, validation_path=validation_path,
                         num_validation=num_validation, seed=seed, prompt_template=prompt_template)
        self.all_tests, self.limits = all_tests, limits
        self.reward_fn = reward_fn

    def reward(self, completion_text: str, example: Example) -> float:
        if self.reward_fn is not None:
            return float(self.reward_fn(completion_text, example))
        return code_reward(completion_text, example, all_tests=self.all_tests, limits=self.limits)

    def demonstration(self, example: Example) -> str:
        """The reference solution (``solution_field``) as a fenced block after empty thinking."""
        if "solution" not in example.meta:
            raise ValueError("this code task has no solution_field, so it has no demonstrations")
        return f"<think> </think>\n```python\n{example.meta['solution']}\n```"
