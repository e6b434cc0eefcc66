"""TRL's ``GRPOConfig`` names: the README's table is ``scalerl.config.trl_names``, every key it
names exists, and an unknown key that is a TRL name stops with what it is here, in one
sentence with exit 2, at the top level (as in ``GRPOConfig``) or under a section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scalerl.config import Config
from scalerl.config.errors import _section
from scalerl.config.trl_names import BY_NAME, README_HEADER, TRL_ROWS, markdown_rows

README = Path(__file__).parents[1] / "docs" / "coming-from-trl.md"  # the TRL table lives on its page


def _readme_rows() -> list[str]:
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(README_HEADER[0])
    assert lines[start + 1] == README_HEADER[1]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_readme_table_is_the_table():
    assert _readme_rows() == markdown_rows()


def _is_key(dotted: str) -> bool:
    model = Config
    for part in dotted.split("."):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return False
        model = _section(field.annotation)
    return True


def test_every_dotted_key_the_table_names_exists():
    named = {key for row in TRL_ROWS for key in re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+", row.here)}
    assert named and {key for key in named if not _is_key(key)} == set()


def test_no_trl_name_is_a_top_level_key_here():
    """Else that name at the top level would load, and mean something else, with no sentence."""
    assert not set(BY_NAME) & set(Config.model_fields)


CASES = {  # TRL name: (value, a section it may be written under, words the sentence must hold)
    "num_generations": (8, "pipeline", ["pipeline.generations (G, the completions per prompt;",
                                        "pipeline.num_generators is the number of generator processes"]),
    "learning_rate": (1e-6, "optim", ["in scalerl: optim.lr"]),
    "max_completion_length": (256, "sampling", ["in scalerl: sampling.max_new_tokens"]),
    "per_device_train_batch_size": (16, "pipeline", ["pipeline.prompts_per_step (P) = N × devices",
                                                     "16 / 8 = 2 (G = 8, pipeline.generations' default)",
                                                     "set pipeline.prompts_per_step: 2"]),
}


def _recipe(tmp: Path, text: str) -> Path:
    path = tmp / "trl.yaml"
    path.write_text("extends: scalerl\n" + text)
    return path


def _refusal(cli_here, tmp: Path, *args: str) -> str:
    proc = cli_here("train", "--no-fit", *args, "--out", str(tmp / "run"), cwd=tmp)
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in proc.stdout + proc.stderr and err.count("\n") == 0, err
    assert not (tmp / "run").exists()
    return err


@pytest.mark.parametrize("where", ["top level", "section"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_trl_name_is_one_sentence_saying_what_it_is_here(tmp_path, cli_here, name, where):
    value, section, words = CASES[name]
    text = f"{name}: {value}\n" if where == "top level" else f"{section}: {{{name}: {value}}}\n"
    recipe = _recipe(tmp_path, text)
    key = name if where == "top level" else f"{section}.{name}"
    err = _refusal(cli_here, tmp_path, "--recipe", str(recipe))
    assert err.startswith(f"scalerl train: unknown config key {key!r} in {recipe.resolve()}: "
                          f"that is TRL's GRPOConfig {name}"), err
    for word in words:
        assert word in err, err
    assert "did you mean" not in err, err


def test_a_trl_name_in_a_set_is_answered_too(tmp_path, cli_here):
    err = _refusal(cli_here, tmp_path, "--set", "num_generations=4")
    assert "in --set num_generations: that is TRL's GRPOConfig num_generations; in scalerl: pipeline.generations" in err


@pytest.mark.parametrize("g_text, says", [
    ("num_generations: 4\n", "16 / 4 = 4 (G = 4 from {recipe}): set pipeline.prompts_per_step: 4"),
    ("pipeline: {generations: 4}\n", "16 / 4 = 4 (G = 4 from {recipe}): set pipeline.prompts_per_step: 4"),
    ("num_generations: 6\n", "16 / 6 = 2.67 (G = 6 from {recipe}) is not a whole number of prompts: "
                             "make N a multiple of G"),
    ("num_generations: 4\ngradient_accumulation_steps: 2\n",
     "16 × 2 / 4 = 8 (G = 4 from {recipe}, gradient_accumulation_steps = 2 from {recipe}): "
     "set pipeline.prompts_per_step: 8"),
])
def test_the_batch_size_is_turned_into_prompts_per_step_with_the_configs_g(tmp_path, cli_here, g_text, says):
    recipe = _recipe(tmp_path, "per_device_train_batch_size: 16\n" + g_text)
    err = _refusal(cli_here, tmp_path, "--recipe", str(recipe))
    assert says.format(recipe=recipe.resolve()) in err, err
