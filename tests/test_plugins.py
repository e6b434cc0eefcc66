"""The plug-in loader: FILE.py:NAME and package.module:NAME, each failure one sentence."""

import pytest

from scalerl.plugins import PluginError, canonical, check_parameter, is_spec, load


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("def reward(completion, answer):\n    return float(answer in completion)\n"
                    "class Box:\n    def inner(completion):\n        return 1.0\n")
    return path


def test_file_and_module_specs_load(plugin, tmp_path, monkeypatch):
    assert load(f"{plugin}:reward")("x 7", answer="7") == 1.0
    assert load(f"{plugin}:Box.inner")("") == 1.0  # a dotted name inside the file
    import os.path

    assert load("os.path:join") is os.path.join
    monkeypatch.chdir(tmp_path)  # a relative file is made absolute, so every process finds it
    assert canonical("mine.py:reward") == f"{plugin.resolve()}:reward"
    assert canonical("os.path:join") == "os.path:join"


def test_a_file_loads_once_per_process(plugin):
    assert load(f"{plugin}:reward") is load(f"{plugin}:reward")


@pytest.mark.parametrize("text,expected", [("addition", False), ("a.py:f", True), ("pkg.mod:f", True),
                                           ("C:thing", True), ("a b:f", False), (":f", False), ("x.py:", False)])
def test_is_spec(text, expected):
    assert is_spec(text) is expected


def test_failures_are_one_sentence(plugin, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    cases = {f"{tmp_path}/missing.py:f": "does not exist",
             f"{plugin}:nothing": "there is no 'nothing'",
             f"{broken}:f": "does not load (ModuleNotFoundError",
             "no_such_package_xyz.mod:f": "no module named 'no_such_package_xyz'",
             "a.py:not an identifier": "is not of the form"}
    for spec, words in cases.items():
        with pytest.raises(PluginError, match=words.replace("(", r"\(")) as info:
            load(spec, "task.reward_fn")
        assert "\n" not in str(info.value) and str(info.value).startswith("task.reward_fn")


def test_check_parameter(plugin):
    check_parameter(load(f"{plugin}:reward"), "completion", "s", "task.reward_fn")
    check_parameter(lambda **kw: 0.0, "completion", "s", "task.reward_fn")  # **kwargs takes it
    with pytest.raises(PluginError, match="takes no 'completion' parameter"):
        check_parameter(lambda text: 0.0, "completion", "s", "task.reward_fn")
    with pytest.raises(PluginError, match="not a function"):
        check_parameter(3, "completion", "s", "task.reward_fn")
