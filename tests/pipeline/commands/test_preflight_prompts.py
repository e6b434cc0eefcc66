"""Preflight's walk over every prompt (chat messages need a template) is for prompts that can
differ in kind: a file's or a user's code's, not a built-in generated task's."""

from __future__ import annotations

from scalerl.config import load_config
from scalerl.config.runtime import task_spec
from scalerl.pipeline.commands import preflight


def test_a_built_in_generated_task_is_checked_on_its_first_prompts_only(monkeypatch):
    cfg = load_config("scalerl", [])  # the built model: no chat template, plain prompts
    task = task_spec(cfg).build()
    walked, drawn = [], []
    monkeypatch.setattr(preflight, "_all_plain", walked.append)
    real = type(task).train_example
    monkeypatch.setattr(type(task), "train_example", lambda self, i: drawn.append(i) or real(self, i))
    preflight.check_prompts(cfg, task)
    assert walked == [] and len(drawn) < 10  # not its 100 000 training examples
    users = cfg.model_copy(update={"task": cfg.task.model_copy(update={"name": "my_tasks.py:make"})})
    assert preflight._prompts_may_vary(users, task)  # a user's task may mix kinds: walked
    assert not preflight._prompts_may_vary(cfg, task)
