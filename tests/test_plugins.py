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


def test_an_import_that_never_returns_stops_with_one_sentence(tmp_path):
    # reliability probe 3 (R20): such a reward module hung config loading with no output
    import os
    import subprocess
    import sys

    (tmp_path / "hangs.py").write_text("import threading\nthreading.Event().wait()  # never set\n"
                                       "def score(completion, **fields):\n    return 1.0\n")
    (tmp_path / "hangs_too.py").write_text("import threading\nthreading.Event().wait()\n")
    for spec in (f"{tmp_path}/hangs.py:score", "hangs_too:score"):
        code = ("import scalerl.plugins as p\np.IMPORT_LIMIT_S = 0.5\n"
                f"p.load({spec!r}, 'task.reward_fn')\nprint('returned')")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env={**os.environ,
                                                 "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"})
        err = proc.stderr.strip()
        assert proc.returncode == 2 and "returned" not in proc.stdout, err
        assert err.startswith(f"scalerl train: task.reward_fn {spec!r}: importing it did not finish within 0.5 s"), err
        assert "\n" not in err and "Traceback" not in err


def test_an_import_within_the_limit_loads_as_before(tmp_path):
    from scalerl import plugins

    (tmp_path / "quick.py").write_text("import time\ntime.sleep(0.2)\ndef score(completion):\n    return 1.0\n")
    with plugins.import_limit("x", "task.reward_fn", limit_s=600):
        pass
    assert plugins.load(f"{tmp_path}/quick.py:score", "task.reward_fn")("") == 1.0
