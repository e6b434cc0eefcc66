"""``bench/corpus/make.py``: every family's runs are valid configs, and the math family's data
are what its docstring says (issue 48, item 6)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from scalerl.config import load_config
from scalerl.data.tasks.base import Example
from scalerl.data.tasks.math import math_reward

MAKE = Path(__file__).resolve().parents[1] / "bench" / "corpus" / "make.py"


@pytest.fixture(scope="module")
def make():
    spec = importlib.util.spec_from_file_location("corpus_make", MAKE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_make"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("corpus_make", None)


@pytest.fixture(scope="module")
def math_file(make, tmp_path_factory):
    """The math family's records, made by ``math_data`` in a scratch folder."""
    path = tmp_path_factory.mktemp("math") / "problems.jsonl"
    original, make.MATH_DATA = make.MATH_DATA, path
    try:
        make.math_data()
    finally:
        make.MATH_DATA = original
    return path


def test_every_scalerl_run_of_every_family_is_a_valid_config(make, math_file, tmp_path):
    """A typo in a family's ``--set``s would cost a run (minutes) before it showed: each run's
    and each shared warm-up's settings load as the recipe's config here."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    names = set()
    for family in make.FAMILIES:
        assert family.name not in names, f"two families named {family.name}"
        names.add(family.name)
        if family.recipe == "trl":
            continue
        for seed, lr in family.runs:
            sets = [s.replace(str(make.MATH_DATA), str(math_file)) for s in family.train_sets(seed, lr)]
            sets = [f"model.base={tmp_path / 'base'}" if s.startswith("model.base=") else s for s in sets]
            cfg = load_config(family.recipe, sets)
            assert (cfg.train.seed, cfg.optim.lr, cfg.train.steps) == (seed, lr, family.steps)
            assert cfg.task.name == family.task
        if family.warmup is not None:
            warm = [s.replace(str(make.MATH_DATA), str(math_file)) for s in (*family.warmup, "train.steps=1")]
            assert load_config(family.recipe, warm).model.base is None  # the warm-up builds the model


def test_the_math_records_are_sums_and_math_verify_scores_their_demonstration(math_file):
    rows = [json.loads(line) for line in math_file.read_text().splitlines()]
    assert len(rows) == 6000 and len({r["problem"] for r in rows}) == 6000
    for r in rows[:200]:
        a, b = (int(t) for t in r["problem"].removeprefix("x - ").split(" = "))
        assert 1 <= a <= 99 and 1 <= b <= 99 and r["answer"] == str(a + b)
        assert r["solution"].startswith(f"x = {a} + {b}: ")
    r = rows[0]
    ex = Example(id=0, problem=r["problem"], answer=r["answer"], meta={"solution": r["solution"]})
    # the demonstration the warm-up imitates scores 1, a wrong sum 0
    assert math_reward(f"<think> {r['solution']} </think> \\boxed{{{r['answer']}}}", ex) == 1.0
    assert math_reward(f"<think> </think> \\boxed{{{int(r['answer']) + 1}}}", ex) == 0.0
