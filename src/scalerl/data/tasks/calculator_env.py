"""The calculator tool of the ``calculator`` task, as an environment (``scalerl.rollout.env``).

``env.name: scalerl.data.tasks.calculator_env:CalculatorEnv`` (the ``scalerl-tools`` recipe).
A turn that ends in ``<calc>EXPR</calc>`` is a tool call: the answer is
``<result>VALUE</result>`` (``<result>error</result>`` for an expression it cannot read), no
reward, and the episode goes on. Any other turn is the final answer: reward 1 when its first
integer is the example's answer, else 0, and the episode ends.

The tool evaluates arithmetic, not code: ``EXPR`` is parsed by ``ast`` and only integer
literals, unary minus and ``+ - *`` are evaluated (at most ``max_digits`` digits per literal,
``max_ops`` operators), so nothing the model writes is executed and no sandbox is needed.
A tool that runs code would go through ``scalerl.data.sandbox``.
"""

from __future__ import annotations

import ast
import warnings

from scalerl.data.tasks.base import first_integer
from scalerl.data.tasks.calculator import CALL_CLOSE, CALL_OPEN, RESULT_CLOSE, RESULT_OPEN

_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


def calculate(expr: str, max_digits: int = 12, max_ops: int = 8) -> int | None:
    """The value of an integer ``+ - *`` expression, or None if it is anything else (or
    longer than the literals and operators allowed could write)."""
    if len(expr) > (max_digits + 4) * (max_ops + 1):  # bounds the parser's work and depth
        return None
    try:
        with warnings.catch_warnings():  # "123abc" warns (invalid decimal literal) before it fails
            warnings.simplefilter("ignore")
            tree = ast.parse(expr.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    ops = sum(isinstance(node, ast.BinOp) for node in ast.walk(tree))
    if ops > max_ops:
        return None

    def value(node) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int and len(str(node.value)) <= max_digits:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("not integer arithmetic")

    try:
        return value(tree)
    except ValueError:
        return None


class CalculatorEnv:
    """One episode: the task's prompt, then tool calls answered until a final answer."""

    def __init__(self, max_digits: int = 12) -> None:
        self.max_digits = max_digits

    def reset(self, example: dict) -> str:
        self.answer = int(example["answer"])
        return example["meta"]["prompt"]

    def step(self, action: str) -> tuple[str | None, float | None, bool]:
        """``(observation, reward, done)``: a plain tuple, as the protocol allows (``data``
        does not import ``rollout``)."""
        head, sep, call = action.rpartition(CALL_OPEN)
        if sep and call.endswith(CALL_CLOSE):
            result = calculate(call[: -len(CALL_CLOSE)], self.max_digits)
            return f"{RESULT_OPEN}{'error' if result is None else result}{RESULT_CLOSE}", None, False
        return None, float(first_integer(action) == self.answer), True
