"""Paths in a config are absolute once loaded, each read from the folder of the file naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scalerl.config import Config, load_config
from scalerl.config.paths import PATH_FIELDS, absolute_layer, absolute_spec

REWARD = "def score(completion, answer, **fields):\n    return float(answer in completion)\n"
ENV = ("class Echo:\n    def __init__(self, index_path=None, mode='x'):\n        pass\n"
       "    def reset(self, example):\n        return 'hi'\n"
       "    def step(self, action):\n        return 'ok', 1.0, True\n")


def _user(root: Path) -> Path:
    """A user's project folder: data, reward, environment, template, a model folder name."""
    root.mkdir(parents=True, exist_ok=True)
    rows = "".join(json.dumps({"prompt": f"{a} add 1", "answer": str(a + 1)}) + "\n" for a in range(6))
    (root / "train.jsonl").write_text(rows)
    (root / "val.jsonl").write_text(rows)
    (root / "my_reward.py").write_text(REWARD)
    (root / "my_env.py").write_text(ENV)
    (root / "chat.jinja").write_text("{{ messages[0]['content'] }}")
    return root


def test_a_recipe_reads_its_paths_from_its_own_folder_whatever_the_working_folder(tmp_path, monkeypatch):
    project = _user(tmp_path / "project")
    (project / "my-run.yaml").write_text(
        "extends: scalerl\n"
        "model: {base: model, chat_template: chat.jinja}\n"
        "task: {name: dataset, reward_fn: my_reward.py:score,\n"
        "       knobs: {path: train.jsonl, validation_path: ./val.jsonl}}\n"
        "env: {name: my_env.py:Echo, knobs: {index_path: data/../idx, mode: data}}\n"
        "forecast: {prior_runs: ../runs/*}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config("../project/my-run.yaml")
    real = project.resolve()
    assert cfg.model.base == str(real / "model")
    assert cfg.model.chat_template == str(real / "chat.jinja")
    assert cfg.task.reward_fn == f"{real / 'my_reward.py'}:score"
    assert cfg.task.knobs["path"] == str(real / "train.jsonl")
    assert cfg.task.knobs["validation_path"] == str(real / "val.jsonl")
    assert cfg.env.name == f"{real / 'my_env.py'}:Echo"
    assert cfg.env.knobs == {"index_path": str(real / "idx"), "mode": "data"}  # only path knobs
    assert cfg.forecast.prior_runs == str(tmp_path.resolve() / "runs" / "*")


def test_each_extends_layer_reads_its_paths_from_its_own_folder(tmp_path, monkeypatch):
    shared = _user(tmp_path / "shared")
    (shared / "base.yaml").write_text("extends: scalerl\nmodel: {base: models/qwen}\n"
                                      "task: {name: dataset, reward_fn: my_reward.py:score, knobs: {path: train.jsonl}}\n")
    mine = _user(tmp_path / "mine")
    (mine / "run.yaml").write_text("extends: ../shared/base.yaml\ntask: {reward_fn: my_reward.py:score}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(mine / "run.yaml")
    assert cfg.model.base == str(shared.resolve() / "models" / "qwen")  # the parent's, from its folder
    assert cfg.task.knobs["path"] == str(shared.resolve() / "train.jsonl")
    assert cfg.task.reward_fn == f"{mine.resolve() / 'my_reward.py'}:score"  # the child's own


def test_set_paths_are_read_from_the_working_folder(tmp_path, monkeypatch):
    project = _user(tmp_path / "project")
    (project / "run.yaml").write_text("extends: scalerl\nmodel: {base: model}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(project / "run.yaml", ["model.base=~/models/m", "forecast.prior_runs=runs",
                                             "task.name=dataset", "task.knobs={path: project/train.jsonl}",
                                             "task.reward_fn=project/my_reward.py:score"])
    assert cfg.model.base == str(Path.home() / "models" / "m")
    assert cfg.forecast.prior_runs == str(tmp_path / "runs")
    assert cfg.task.knobs["path"] == str(tmp_path / "project" / "train.jsonl")
    assert cfg.task.reward_fn == f"{project.resolve() / 'my_reward.py'}:score"


def test_names_and_module_specs_stay_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config("scalerl-tools")
    assert cfg.task.name == "calculator" and cfg.env.name == "scalerl.data.tasks.calculator_env:CalculatorEnv"
    assert cfg.model.chat_template == "auto" and cfg.model.base is None and cfg.forecast.prior_runs is None
    assert absolute_spec("pkg.mod:fn", "/x") == "pkg.mod:fn"
    assert absolute_spec(None, "/x") is None


def test_a_list_of_reward_specs_is_resolved_entry_by_entry():
    assert absolute_spec(["r.py:a", "pkg.m:b", "/abs/r.py:c", "../up.py:d"], "/home/u/proj") == [
        "/home/u/proj/r.py:a", "pkg.m:b", "/abs/r.py:c", "/home/u/up.py:d"]


def test_a_layer_is_copied_not_changed_and_wrong_types_are_left_for_validation():
    layer = {"model": {"base": "m"}, "task": {"knobs": {"path": 3}}, "forecast": "oops"}
    out = absolute_layer(layer, "/p")
    assert out == {"model": {"base": "/p/m"}, "task": {"knobs": {"path": 3}}, "forecast": "oops"}
    assert layer["model"]["base"] == "m"


def test_every_path_field_is_a_config_field():
    for dotted in PATH_FIELDS:
        section, name = dotted.split(".")
        assert name in Config.model_fields[section].annotation.model_fields, dotted


def test_a_config_built_in_code_reads_relative_paths_from_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = Config.model_validate({"model": {"base": "m"}, "forecast": {"prior_runs": "r"}})
    assert cfg.model.base == str(tmp_path / "m") and cfg.forecast.prior_runs == str(tmp_path / "r")


@pytest.mark.parametrize("where", ["yaml", "set"])
def test_a_missing_file_is_named_by_its_absolute_path(where, tmp_path, monkeypatch):
    from scalerl.config import ConfigError

    project = tmp_path / "project"
    project.mkdir()
    (project / "run.yaml").write_text("extends: scalerl\n" + ("task: {reward_fn: gone.py:score}\n" if where == "yaml" else ""))
    monkeypatch.chdir(tmp_path)
    sets = ["task.reward_fn=gone.py:score"] if where == "set" else []
    folder = project if where == "yaml" else tmp_path
    with pytest.raises(ConfigError, match=f"the file {folder.resolve() / 'gone.py'} does not exist"):
        load_config(project / "run.yaml", sets)


def test_a_saved_config_holds_absolute_paths_even_for_a_config_copied_with_a_relative_one(tmp_path, monkeypatch):
    from scalerl.config import dump_config

    monkeypatch.chdir(tmp_path)
    cfg = load_config("scalerl")
    copied = cfg.model_copy(update={"model": cfg.model.model_copy(update={"base": "runs/_base/m"})})  # as a sweep does
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "config.yaml").write_text(dump_config(copied))
    assert load_config(tmp_path / "sub" / "config.yaml").model.base == str(tmp_path / "runs" / "_base" / "m")


def test_each_reward_function_of_a_list_is_read_from_its_recipes_folder(tmp_path, monkeypatch):
    project = _user(tmp_path / "project")
    (project / "run.yaml").write_text(
        "extends: scalerl\ntask: {name: dataset, knobs: {path: train.jsonl},\n"
        "       reward_fns: [my_reward.py:score, ./my_reward.py:score]}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(project / "run.yaml")
    assert cfg.task.reward_fns == [f"{project.resolve() / 'my_reward.py'}:score"] * 2
