"""``scalerl train`` on bad input: exit code 2, one sentence on stderr naming the file, field
or folder, no traceback, and nothing already written lost.

Most cases fail at config or preflight checks, before torch is imported or any model built.
They run the command's ``main`` in this process (a fresh interpreter per case would spend
seconds importing for milliseconds of work): an exception that escapes ``main`` fails the test
as a traceback would, and stderr is read from file descriptor 2. A few cases run through the
real command in a fresh interpreter, as a user runs it (the last tests of this file, and the
runs of ``test_user_code_runs.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalerl.config import dump_config, load_config

EXIT_BAD_INPUT = 2


def scalerl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``scalerl ARGS`` in a fresh interpreter."""
    code = "import sys\nfrom scalerl.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)



def assert_one_sentence(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == EXIT_BAD_INPUT, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    err = proc.stderr.strip()
    assert err.count("\n") == 0 and err.startswith("scalerl"), err
    for needle in needles:
        assert needle in err, err
    return err


def _fake_model(folder: Path, context: int = 4096, weights: bool = True) -> Path:
    """A folder that looks like a Hugging Face model (its weights file is empty)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(f'{{"model_type": "llama", "max_position_embeddings": {context}}}')
    if weights:
        (folder / "model.safetensors").write_bytes(b"")
    return folder


def _case(tmp: Path, name: str) -> tuple[list[str], list[str]]:
    """(arguments, words the sentence must contain) of one bad-input case."""
    model = ["--set", f"model.base={_fake_model(tmp / 'model')}"]
    out = ["--out", str(tmp / "run")]
    if name == "model.base missing":
        return ["--set", f"model.base={tmp / 'nowhere'}", *out], ["model.base", "is not a folder"]
    if name == "model.base without config.json":
        (tmp / "empty").mkdir()
        return ["--set", f"model.base={tmp / 'empty'}", *out], ["model.base", "no config.json"]
    if name == "model.base with a bad config.json":
        _fake_model(tmp / "bad").joinpath("config.json").write_text("{")
        return ["--set", f"model.base={tmp / 'bad'}", *out], ["model.base", "config.json is not valid JSON"]
    if name == "model.base without weights":
        _fake_model(tmp / "bare", weights=False)
        return ["--set", f"model.base={tmp / 'bare'}", *out], ["model.base", "holds no weights"]
    if name == "model.base whose weights do not load":
        return [*model, *out], ["model.base", "does not load as a model"]
    if name == "unknown task":
        return [*model, "--set", "task.name=nope", *out], ["'task'", "--set task.name", "unknown task 'nope'"]
    if name == "unknown task knob":
        return [*model, "--set", "task.knobs.bogus=1", *out], ["task 'addition' has no knob 'bogus'"]
    if name == "bad task knob value":
        return [*model, "--set", "task.knobs.min_digits=5", *out], ["task.knobs", "min_digits"]
    if name == "code does not inherit addition's knobs":
        return [*model, "--set", "task.name=code", *out], ["task 'code' needs the knob 'path'"]
    if name == "--out is a file":
        (tmp / "file").write_text("x")
        return [*model, "--out", str(tmp / "file")], ["--out", str(tmp / "file"), "is a file"]
    if name == "--out is read-only":
        return [*model, "--out", str(_read_only(tmp) / "run")], ["--out", "cannot be written"]
    if name == "eval.num_prompts=0":
        return [*model, "--set", "eval.num_prompts=0", *out], ["'eval.num_prompts'", "greater than or equal to 1"]
    if name == "rollout.vllm.extra repeating the trainer's own arguments":
        return [*model, "--set", "rollout.vllm.extra={seed: 3, dtype: half}", *out], [
            "rollout.vllm.extra cannot set dtype, seed"]
    if name == "rollout.vllm.extra spreading one engine over devices":
        return [*model, "--set", "rollout.vllm.extra={tensor_parallel_size: 2}", *out], [
            "rollout.vllm.extra cannot set tensor_parallel_size", "pipeline.num_generators"]
    if name == "recipe with invalid UTF-8":
        (tmp / "bad.yaml").write_bytes(b"name: x\ndescription: caf\xe9\n")
        return ["--recipe", str(tmp / "bad.yaml"), *out], [f"{tmp / 'bad.yaml'} line 2 is not UTF-8"]
    if name == "max_minutes=-1":
        return [*model, "--set", "train.max_minutes=-1", *out], ["'train.max_minutes'", "greater than 0"]
    if name == "a nan number":
        return [*model, "--set", "optim.lr=nan", *out], ["'optim.lr'", "finite"]
    if name == "max_new_tokens above the context":
        small = ["--set", f"model.base={_fake_model(tmp / 'small', context=64)}"]
        return [*small, *out], ["sampling.max_new_tokens=66", "context of 64 tokens"]
    if name == "max_new_tokens above a preset's context":
        return ["--set", "sampling.max_new_tokens=5000", *out], ["sampling.max_new_tokens=5000", "'nano'"]
    if name == "--resume with --recipe":
        return ["--resume", str(_run_dir(tmp)), "--recipe", "loo-dapo"], ["--resume", "no --recipe"]
    if name == "--resume without config.yaml":
        (tmp / "run").mkdir()
        return ["--resume", str(tmp / "run")], ["is not a run directory"]
    if name == "--resume with an empty config.yaml":
        _run_dir(tmp).joinpath("config.yaml").write_text("")
        return ["--resume", str(tmp / "run")], [f"{tmp / 'run' / 'config.yaml'} is empty"]
    if name == "--resume with an unparsable config.yaml":
        _run_dir(tmp).joinpath("config.yaml").write_text("train: [1\n")
        return ["--resume", str(tmp / "run")], ["config.yaml line 2 is not valid YAML"]
    if name == "--resume where no checkpoint loads":
        for ckpt in ("checkpoint", "checkpoint.old"):
            (_run_dir(tmp) / ckpt).mkdir()
            (tmp / "run" / ckpt / "meta.json").write_text("{")
        return ["--resume", str(tmp / "run")], [f"no checkpoint in {tmp / 'run'} loads", "meta.json is corrupt"]
    if name == "an unknown flag":
        return ["--bogus"], ["unrecognized arguments: --bogus"]
    raise AssertionError(name)


def _run_dir(tmp: Path) -> Path:
    run = tmp / "run"
    if not run.is_dir():
        run.mkdir()
        cfg = load_config("scalerl", [f"model.base={_fake_model(tmp / 'model')}"])
        (run / "config.yaml").write_text(dump_config(cfg))
    return run


def _read_only(tmp: Path) -> Path:
    """A folder no file can be created in: mode 0555, or /sys for root (who ignores modes)."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp / "ro"
    folder.mkdir(mode=0o555)
    return folder


CASES = ["model.base missing", "model.base without config.json", "model.base with a bad config.json",
         "model.base without weights", "model.base whose weights do not load", "unknown task",
         "unknown task knob", "bad task knob value", "code does not inherit addition's knobs",
         "--out is a file", "--out is read-only", "eval.num_prompts=0", "recipe with invalid UTF-8",
         "max_minutes=-1", "a nan number", "max_new_tokens above the context",
         "max_new_tokens above a preset's context", "--resume with --recipe",
         "--resume without config.yaml", "--resume with an empty config.yaml",
         "--resume with an unparsable config.yaml", "--resume where no checkpoint loads", "an unknown flag",
         "rollout.vllm.extra repeating the trainer's own arguments",
         "rollout.vllm.extra spreading one engine over devices"]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, name, cli_here):
    args, needles = _case(tmp_path, name)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert_one_sentence(cli_here("train", "--no-fit", *args, cwd=tmp_path), *needles)
    for path, data in before.items():  # nothing already written is lost or changed
        assert path.read_bytes() == data, path
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_full_disk_while_checkpointing_is_one_sentence_and_keeps_the_checkpoint(nano_dir, tmp_path, monkeypatch,
                                                                                    cli_here):
    import errno

    from scalerl import checkpoint
    from scalerl.checkpoint import load_checkpoint

    real, calls = checkpoint._write_state, []

    def write_state(path, state):  # the first checkpoint lands, the disk is full at the second
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, state)

    monkeypatch.setattr(checkpoint, "_write_state", write_state)

    run = tmp_path / "run"
    sets = {"model.base": nano_dir, "pipeline.backend": "inprocess", "train.steps": 2,
            "train.checkpoint_every": 1, "eval.num_prompts": 1, "eval.k": 1,
            "pipeline.prompts_per_step": 1, "pipeline.generations": 2, "length.control": "none",
            "sampling.max_new_tokens": 4, "forecast.enabled": "false", "log.progress": "false",
            "log.tensorboard": "false"}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    proc = cli_here("train", "--no-fit", *args, "--out", str(run), cwd=tmp_path)
    assert_one_sentence(proc, f"no space left in {run} for a checkpoint: it needs about ", " bytes ",
                        "the previous checkpoint is intact", f"--resume {run}")
    state, meta = load_checkpoint(run)
    assert meta["step"] == 1 and not list(run.glob(".checkpoint.tmp-*"))


# ---------------------------------------------------------------------------- refused before anything


def _bomb_recipe(tmp: Path) -> Path:
    """Nine levels of nine aliases in ``rollout.vllm.extra``: 9^9 values once expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return _write(tmp / "bomb.yaml", "rollout:\n  vllm:\n    extra:\n" + "".join(f"      {x}\n" for x in lines))


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _early_case(tmp: Path, name: str) -> tuple[list[str], list[str], list[str]]:
    """(arguments, words the sentence must contain, words it must not) of a case refused
    before anything is built or written."""
    out = ["--out", str(tmp / "run")]
    recipe = lambda text: ["--recipe", str(_write(tmp / "r.yaml", text)), *out]  # noqa: E731
    if name == "alias bomb in rollout.vllm.extra":
        return ["--recipe", str(_bomb_recipe(tmp)), *out], ["bomb.yaml line", "aliases expand to more than"], []
    if name.startswith("env.name"):  # a user's environment: file, name, methods
        env = _write(tmp / "env.py", "class Env:\n    def reset(self, example):\n        return 'x'\n")
        spec, words = {"env.name: no such file": (f"{tmp / 'gone.py'}:Env", ["does not exist"]),
                       "env.name: no such class": (f"{env}:Missing", ["there is no 'Missing'"]),
                       "env.name: no step method": (f"{env}:Env", ["has no step() method"])}[name]
        return ["--set", f"env.name={spec}", *out], ["env.name", *words], []
    if name.startswith("dataset:"):  # a user's data file, refused at preflight, before the run folder
        reward = _write(tmp / "reward.py", "def score(completion, **fields):\n    return 1.0\n")
        data = tmp / "data.jsonl"
        if name == "dataset: one record":
            _write(data, '{"prompt": "1+1?"}\n')
            words = [f"no validation problem is held out of {data} (1 record", "task.knobs.validation_path"]
        elif name == "dataset: a line nested 100,000 deep":
            _write(data, '{"prompt": "1+1?"}\n{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
            words = [f"{data}:2: lists and objects nest too deep to read"]
        else:
            data.symlink_to("/dev/zero")
            words = [f"{data}: not a regular file"]
        return ["--set", "task.name=dataset", "--set", f"task.knobs.path={data}",
                "--set", f"task.reward_fn={reward}:score", *out], words, []
    if name == "list nested 20,000 deep":
        return recipe("train: " + "[" * 20_000 + "]" * 20_000 + "\n"), ["r.yaml line 1", "deeper than 64"], []
    if name == "mapping nested 3,000 deep":
        text = "".join(" " * i + f"k{i}:\n" for i in range(3000)) + " " * 3000 + "1\n"
        return recipe(text), ["r.yaml line", "deeper than 64"], []
    if name == "two train sections":
        return recipe("train: {steps: 3}\nname: x\ntrain: {steps: 4}\n"), [
            "r.yaml line 3", "'train' appears twice", "first on line 1"], []
    if name == "description: !!binary":
        return recipe("description: !!binary aGVsbG8=\n"), ["r.yaml line 1", "!!binary is not allowed"], []
    if name == "extends: 5":
        return recipe("extends: 5\n"), ["r.yaml", "'extends' must be a recipe name", "int 5"], []
    if name == "extends: a list":
        return recipe("extends: [scalerl, loo-dapo]\n"), ["r.yaml", "'extends' is a list"], []
    if name == "extends: ''":
        return recipe("extends: ''\n"), ["r.yaml", "'extends' is empty"], []
    if name == "extends: a folder":
        (tmp / "folder").mkdir()
        return recipe("extends: ./folder\n"), [f"{tmp / 'folder'}, which", "is a folder, not a YAML file"], []
    if name == "extends: a missing file":
        return recipe("extends: ./missing.yaml\n"), [f"{tmp / 'missing.yaml'}, which {tmp / 'r.yaml'} extends",
                                                     "does not exist"], []
    if name == "train.seed=2^70":
        return ["--set", f"train.seed={2**70}", *out], ["'train.seed' in --set train.seed", "less than"], []
    if name == "train.seed=-1":
        return ["--set", "train.seed=-1", *out], ["'train.seed' in --set train.seed", "greater than or equal"], []
    if name == "--out too long":
        return ["--out", str(tmp / ("x" * 300))], ["--out", "File name too long"], []
    if name == "--out empty":
        return ["--out", ""], ["--out", "empty"], []
    if name == "recipe knobs with an unrelated --set":
        return [*recipe("eval: {downstream_knobs: {a0: 1}}\n"), "--set", "eval.num_prompts=5"], [
            f"in {tmp / 'r.yaml'} (eval.downstream_knobs)", "has no knob 'a0'"], ["--set"]
    raise AssertionError(name)


EARLY_CASES = ["alias bomb in rollout.vllm.extra", "list nested 20,000 deep", "mapping nested 3,000 deep",
               "two train sections", "description: !!binary", "extends: 5", "extends: a list", "extends: ''",
               "extends: a folder", "extends: a missing file", "train.seed=2^70", "train.seed=-1",
               "--out too long", "--out empty", "recipe knobs with an unrelated --set",
               "env.name: no such file", "env.name: no such class", "env.name: no step method",
               "dataset: one record", "dataset: a line nested 100,000 deep", "dataset: a link to /dev/zero"]


@pytest.mark.parametrize("name", EARLY_CASES)
def test_bad_input_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, name):
    """In this process (each case fails at the config or the run folder's path, in
    milliseconds): an escaping exception fails the test as a traceback would."""
    from scalerl.cli import main

    args, needles, absent = _early_case(tmp_path, name)
    before = sorted(tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)  # so an empty --out would write here
    try:
        rc = main(["train", "--no-fit", *args])
    except SystemExit as stop:  # argparse's refusals
        rc = stop.code
    err = capsys.readouterr().err.strip()
    assert rc == EXIT_BAD_INPUT, err
    assert err.count("\n") == 0 and err.startswith("scalerl train"), err
    for needle in needles:
        assert needle in err, err
    for word in absent:
        assert word not in err, err
    assert sorted(tmp_path.rglob("*")) == before  # no run folder, no config.yaml


def test_a_refused_recipe_is_one_sentence_through_the_real_command(tmp_path):
    """One case end to end in a fresh interpreter, as a user runs it."""
    proc = scalerl("train", "--no-fit", "--recipe", str(_bomb_recipe(tmp_path)), "--out", str(tmp_path / "run"),
                   cwd=tmp_path)
    assert_one_sentence(proc, "bomb.yaml line", "aliases expand to more than")
    assert not (tmp_path / "run").exists()
