"""The typed trainer config: recipes load, overrides are typed, bad input is one clear sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from scalerl.config import Config, ConfigError, load_config, parse_override, recipe_names

PAPER_RECIPES = {"scalerl", "deepseek-grpo", "qwen-dapo", "magistral", "minimax-m1"}
PORTS = {"trl-grpo"}
LOO = {"loo-plan", "loo-lp", "loo-batch", "loo-8op", "loo-fp32", "loo-savg", "loo-dapo", "loo-npr"}


def test_every_preset_ships_and_validates():
    assert PAPER_RECIPES | LOO | PORTS <= set(recipe_names())
    for name in recipe_names():
        cfg = load_config(name)
        assert cfg.name == name


def test_the_trl_port_is_grpotrainers_defaults():
    """Each field against the TRL 1.16 ``GRPOConfig`` default it stands for (the recipe's comments)."""
    c = load_config("trl-grpo")
    assert (c.loss.name, c.loss.aggregation, c.loss.dapo.eps_low, c.loss.dapo.eps_high) == ("dapo", "token", 0.2, 0.2)
    assert (c.advantages.norm, c.pipeline.mode, c.length.control) == ("prompt", "sync", "none")
    assert not c.filters.zero_variance and not c.curriculum.no_positive_resampling
    assert (c.optim.lr, c.optim.weight_decay, c.optim.warmup_steps, c.optim.grad_clip) == (1e-6, 0.0, 0, 1.0)
    assert c.optim.betas == (0.9, 0.999) and c.sampling.temperature == 1.0
    assert not c.model.fp32_head_trainer and not c.model.fp32_head_generator


def _diff(a: Config, b: Config) -> set[str]:
    def flat(d, prefix=""):
        out = {}
        for key, value in d.items():
            if isinstance(value, dict) and key != "knobs":
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[prefix + key] = value
        return out

    fa, fb = flat(a.model_dump()), flat(b.model_dump())
    return {k for k in fa if fa[k] != fb[k]} - {"name", "description"}


@pytest.mark.parametrize(
    "name, axis",
    [
        ("loo-plan", {"advantages.norm"}),
        ("loo-lp", {"length.control"}),
        ("loo-batch", {"filters.zero_variance"}),
        ("loo-8op", {"pipeline.mode"}),
        ("loo-fp32", {"model.fp32_head_trainer", "model.fp32_head_generator"}),
        ("loo-savg", {"loss.aggregation"}),
        ("loo-dapo", {"loss.name"}),
        ("loo-npr", {"curriculum.no_positive_resampling"}),
    ],
)
def test_leave_one_out_reverts_exactly_one_axis(name, axis):
    assert _diff(load_config(name), load_config("scalerl")) == axis


def test_overrides_are_typed():
    cfg = load_config("scalerl", ["optim.lr=1e-4", "pipeline.k=2", "optim.grad_clip=null"])
    assert cfg.optim.lr == 1e-4 and isinstance(cfg.optim.lr, float)
    assert cfg.pipeline.k == 2 and cfg.optim.grad_clip is None
    assert parse_override("loss.name=dapo") == ("loss.name", {"loss": {"name": "dapo"}})


def test_config_is_frozen():
    cfg = load_config("scalerl")
    with pytest.raises(ValidationError):
        cfg.optim.lr = 1.0  # type: ignore[misc]


def test_each_loss_passes_only_its_own_hparams():
    assert load_config("scalerl").loss.hparams() == {"eps_max": 5.0, "eps_min": None}
    assert load_config("qwen-dapo").loss.hparams() == {"eps_low": 0.2, "eps_high": 0.26}


def test_unknown_key_names_key_and_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: scalerl\noptim:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.learning_rate' in .*bad.yaml"):
        load_config(bad)


def test_bad_value_names_key_and_override():
    with pytest.raises(ConfigError, match=r"'pipeline.mode' in --set pipeline.mode"):
        load_config("scalerl", ["pipeline.mode=async"])
    with pytest.raises(ConfigError, match=r"'optim.lr'.*greater than 0"):
        load_config("scalerl", ["optim.lr=-1"])


def test_bad_yaml_and_unknown_recipe(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("optim: [1,\n")
    with pytest.raises(ConfigError, match="broken.yaml line"):
        load_config(broken)
    with pytest.raises(ConfigError, match="unknown recipe 'nope'"):
        load_config("nope")


def test_cross_field_check_is_reported():
    with pytest.raises(ConfigError, match="interrupt_range"):
        load_config("scalerl", ["length.interrupt_range=[60, 70]"])


def test_forecast_and_early_stop_options_validate():
    with pytest.raises(ConfigError, match=r"'train.stop_if_ceiling_below'.*less than or equal to 1"):
        load_config("scalerl", ["train.stop_if_ceiling_below=1.5"])
    with pytest.raises(ConfigError, match=r"'forecast.level'"):
        load_config("scalerl", ["forecast.level=95"])
    with pytest.raises(ConfigError, match="stop_if_target_unreachable needs forecast.target"):
        load_config("scalerl", ["train.stop_if_target_unreachable=true"])
    cfg = load_config("scalerl", ["forecast.target=0.6", "train.stop_if_target_unreachable=true"])
    assert cfg.forecast.target == 0.6 and cfg.forecast.enabled


def test_switching_the_task_starts_from_its_own_knobs(tmp_path):
    assert load_config("scalerl").task.knobs == {"min_digits": 1, "max_digits": 2}
    assert load_config("scalerl", ["task.name=multiplication"]).task.knobs == {}
    assert load_config("scalerl", ["task.name=addition"]).task.knobs == {"min_digits": 1, "max_digits": 2}
    # the --set overrides count as one layer: their order does not matter
    for sets in (["task.name=code", "task.knobs={path: p.jsonl}"], ["task.knobs={path: p.jsonl}", "task.name=code"]):
        # a data file is read as an absolute path, so every process finds the same one
        assert load_config("scalerl", sets).task.knobs == {"path": str(Path("p.jsonl").absolute())}
    child = tmp_path / "child.yaml"
    child.write_text("extends: scalerl\ntask: {name: multiplication}\n")
    assert load_config(child).task.knobs == {}
    with pytest.raises(ConfigError, match=r"'task' in --set task.name: task 'code' needs the knob 'path'"):
        load_config("scalerl", ["task.name=code"])


def test_unknown_task_and_knob_name_the_source(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid 'task' in --set task.name: unknown task 'nope'; choose one of"):
        load_config("scalerl", ["task.name=nope"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: scalerl\ntask:\n  knobs: {max_digit: 3}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: task 'addition' has no knob 'max_digit'; its knobs are"):
        load_config(bad)


def test_a_registered_task_with_free_knobs_is_accepted(monkeypatch):
    from scalerl.data.tasks import registry

    monkeypatch.setitem(registry._FACTORIES, "free-knobs-test", lambda **knobs: None)  # unregistered after
    assert load_config("scalerl", ["task.name=free-knobs-test", "task.knobs={anything: 1}"]).task.knobs == {"anything": 1}


@pytest.mark.parametrize("override, key", [
    ("optim.lr=nan", "optim.lr"), ("optim.weight_decay=inf", "optim.weight_decay"),
    ("train.max_minutes=-1", "train.max_minutes"), ("eval.num_prompts=0", "eval.num_prompts"),
    ("sampling.max_new_tokens=0", "sampling.max_new_tokens"), ("model.sft.max_seconds=0", "model.sft.max_seconds"),
])
def test_nonsense_numbers_are_rejected_at_load(override, key):
    with pytest.raises(ConfigError, match=rf"bad value .* for '{key}' in --set {key}"):
        load_config("scalerl", [override])


def test_a_recipe_that_is_not_utf8_names_the_line(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: x\n\ndescription: café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml line 3 is not UTF-8 text \(byte 0xe9\)"):
        load_config(bad)


# ---------------------------------------------------------------------------- bounded recipe YAML


def _bomb(levels: int = 9, width: int = 9, indent: str = "      ") -> str:
    """Nine levels of nine aliases: a few hundred bytes that expand to 9^9 values."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(indent + line for line in lines) + "\n"


def _recipe(tmp_path, text: str, name: str = "r.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_alias_bomb_is_refused_at_load_wherever_it_is(tmp_path):
    bomb = _recipe(tmp_path, "extends: scalerl\nrollout:\n  vllm:\n    extra:\n" + _bomb())
    with pytest.raises(ConfigError, match=r"r.yaml line \d+: its aliases expand to more than 100,000 values"):
        load_config(bomb)
    flow = "{" + ", ".join(_bomb(indent="").strip().splitlines()) + "}"
    with pytest.raises(ConfigError, match=r"--set rollout.vllm.extra: its value is refused: its aliases expand"):
        load_config("scalerl", [f"rollout.vllm.extra={flow}"])
    selfish = _recipe(tmp_path, "rollout: {vllm: {extra: {a: &a [1, *a]}}}\n", "self.yaml")
    with pytest.raises(ConfigError, match="self.yaml line 1: an alias refers to a value that contains it"):
        load_config(selfish)
    # aliases that stay small are ordinary YAML and still work
    fine = _recipe(tmp_path, "extends: scalerl\nrollout: {vllm: {extra: {a: &k {max_model_len: 64}, b: *k}}}\n",
                   "fine.yaml")
    assert load_config(fine).rollout.vllm.extra == {"a": {"max_model_len": 64}, "b": {"max_model_len": 64}}


def test_nesting_is_bounded_without_a_recursion_error(tmp_path):
    deep_list = _recipe(tmp_path, "train: " + "[" * 20_000 + "]" * 20_000 + "\n", "list.yaml")
    with pytest.raises(ConfigError, match=r"list.yaml line 1: lists and mappings nest deeper than 64 levels"):
        load_config(deep_list)
    deep_map = _recipe(tmp_path, "".join(" " * i + f"k{i}:\n" for i in range(3000)) + " " * 3000 + "1\n", "map.yaml")
    with pytest.raises(ConfigError, match=r"map.yaml line \d+: lists and mappings nest deeper than 64"):
        load_config(deep_map)
    # 60 levels of aliases, each 40 deep: shallow in the file, 2,400 deep once expanded
    chain = "".join(f"a{i}: &a{i} " + "[" * 40 + (f"*a{i - 1}" if i else "1") + "]" * 40 + "\n" for i in range(60))
    with pytest.raises(ConfigError, match=r"chain.yaml line \d+: its aliases nest lists and mappings deeper"):
        load_config(_recipe(tmp_path, "rollout: {vllm: {extra: {}}}\nx:\n" + "".join(
            "  " + line + "\n" for line in chain.splitlines()), "chain.yaml"))
    nested = "[" * 50 + "1" + "]" * 50  # deep, but within the bound: an ordinary value
    assert load_config(_recipe(tmp_path, f"rollout: {{vllm: {{extra: {{x: {nested}}}}}}}\n", "ok.yaml"))


def test_a_repeated_key_is_refused_with_its_line(tmp_path):
    dup = _recipe(tmp_path, "name: dup\ntrain: {steps: 3}\ndescription: x\ntrain: {steps: 4}\n")
    with pytest.raises(ConfigError, match=r"r.yaml line 4: the key 'train' appears twice in one mapping "
                                          r"\(first on line 2\)"):
        load_config(dup)
    with pytest.raises(ConfigError, match=r"--set train: its value is refused: the key 'steps' appears twice"):
        load_config("scalerl", ["train={steps: 3, steps: 4}"])
    merged = _recipe(tmp_path, "base: &b {steps: 3, seed: 1}\ntrain: {<<: *b, steps: 4}\n", "merge.yaml")
    with pytest.raises(ConfigError, match="unknown config key 'base'"):  # a merge key may be overridden
        load_config(merged)


def test_non_plain_tags_are_refused_and_dates_stay_strings(tmp_path):
    for tag, value in (("binary", "aGVsbG8="), ("set", "{a, b}"), ("timestamp", "2024-01-01")):
        path = _recipe(tmp_path, f"name: t\ndescription: !!{tag} {value}\n", f"{tag}.yaml")
        with pytest.raises(ConfigError, match=rf"{tag}.yaml line 2: the tag !!{tag} is not allowed"):
            load_config(path)
    assert load_config(_recipe(tmp_path, "description: 2024-01-01\n")).description == "2024-01-01"
    with pytest.raises(ValidationError, match="description"):  # bytes are not decoded into a str
        Config(description=b"hello")


# ---------------------------------------------------------------------------- extends


@pytest.mark.parametrize("value, words", [
    ("5", "'extends' must be a recipe name or a YAML path, not the int 5"),
    ("[scalerl, loo-dapo]", "'extends' is a list, but a recipe extends exactly one recipe"),
    ("''", "'extends' is empty"),
    ("", "'extends' is empty"),
])
def test_extends_must_name_one_recipe(tmp_path, value, words):
    path = _recipe(tmp_path, f"extends: {value}\n")
    with pytest.raises(ConfigError, match=rf"^{path}: {words}"):
        load_config(path)


def test_extends_reads_a_relative_path_from_the_extending_file(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "elsewhere").mkdir()
    _recipe(tmp_path, "extends: scalerl\ntrain: {steps: 7}\n", "parent.yaml")
    child = _recipe(tmp_path, "extends: ../parent.yaml\nname: child\n", "sub/child.yaml")
    monkeypatch.chdir(tmp_path / "elsewhere")  # not where the parent is
    assert load_config(child).train.steps == 7
    orphan = _recipe(tmp_path, "extends: ./missing.yaml\n", "sub/orphan.yaml")
    with pytest.raises(ConfigError, match=rf"recipe file {tmp_path / 'sub' / 'missing.yaml'}, which "
                                          rf"{orphan} extends, does not exist"):
        load_config(orphan)
    folder = _recipe(tmp_path, "extends: ../elsewhere\n", "sub/folder.yaml")
    with pytest.raises(ConfigError, match=r"elsewhere, which .*folder.yaml extends, is a folder, not a YAML file"):
        load_config(folder)


# ---------------------------------------------------------------------------- --set and seeds


def test_overrides_are_applied_together_and_a_dotted_one_keeps_the_other_keys(tmp_path):
    sets = ["task.knobs.path=p.jsonl", "task.knobs.problem_field=q", "task.name=code"]
    assert load_config("scalerl", sets).task.knobs == {"path": str(Path("p.jsonl").absolute()), "problem_field": "q"}
    knobs3 = _recipe(tmp_path, "extends: scalerl\ntask: {knobs: {min_digits: 2, max_digits: 3}}\n")
    assert load_config(knobs3, ["task.knobs.max_digits=4"]).task.knobs == {"min_digits": 2, "max_digits": 4}
    # a whole mapping replaces the knobs, as a recipe's task.knobs does
    assert load_config(knobs3, ["task.knobs={max_digits: 4}"]).task.knobs == {"max_digits": 4}
    cfg = load_config(knobs3, ["train={steps: 4}", "train.seed=3"])  # sections still merge
    assert (cfg.train.steps, cfg.train.seed, cfg.train.max_minutes) == (4, 3, 6.5)


@pytest.mark.parametrize("seed", [-1, 2**32, 2**70])
def test_seeds_outside_what_numpy_and_torch_accept_are_refused(seed):
    with pytest.raises(ConfigError, match=rf"bad value {seed} for 'train.seed' in --set train.seed"):
        load_config("scalerl", [f"train.seed={seed}"])


def test_the_largest_seed_is_accepted():
    assert load_config("scalerl", [f"train.seed={2**32 - 1}"]).train.seed == 2**32 - 1


# ---------------------------------------------------------------------------- which layer is blamed


def test_a_whole_config_error_blames_the_layer_that_set_the_field(tmp_path):
    knobs = _recipe(tmp_path, "extends: scalerl\neval: {downstream_knobs: {a0: 1}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(knobs, ["eval.num_prompts=5"])
    assert str(err.value).startswith(f"invalid config in {knobs} (eval.downstream_knobs): ")
    assert "--set" not in str(err.value)
    ranged = _recipe(tmp_path, "extends: scalerl\nlength: {interrupt_range: [50, 60]}\n", "range.yaml")
    with pytest.raises(ConfigError, match=rf"^invalid config in {ranged} \(length.interrupt_range\) and "
                                          r"--set sampling.max_new_tokens: length.interrupt_range must end"):
        load_config(ranged, ["sampling.max_new_tokens=55", "eval.num_prompts=5"])


def test_an_error_no_layer_set_a_field_for_names_the_whole_stack():
    from pydantic import BaseModel, model_validator

    from scalerl.config.errors import explain

    class Whole(BaseModel):
        a: int = 0

        @model_validator(mode="after")
        def _never(self):
            raise ValueError("the parts do not fit")

    layers = [("base.yaml", {}), ("r.yaml", {"a": 1}), ("--set a", {"a": 2}), ("--set b.c", {"b": {"c": 1}})]
    with pytest.raises(ValidationError) as err:
        Whole.model_validate({"a": 2})
    assert explain(err.value, layers, Whole) == ("invalid config in the recipe r.yaml with the overrides "
                                                 "--set a, --set b.c: the parts do not fit.")
    assert explain(err.value, layers[:2], Whole) == "invalid config in the recipe r.yaml: the parts do not fit."


@pytest.mark.parametrize("sets, says", [
    (["learner.world_size=9"], "more than pipeline.prompts_per_step=8"),
    (["learner.world_size=2", "train.cores=1"], "more than the 1 cores"),
    (["learner.world_size=2", "model.lora.rank=4"], "model.lora with learner.world_size > 1"),
    (["learner.strategy=zero3"], "'learner.strategy'"),
])
def test_a_learner_world_the_run_cannot_serve_is_one_sentence(sets, says):
    with pytest.raises(ConfigError, match=says):
        load_config("scalerl", sets)


@pytest.mark.parametrize("key, value, meant", [
    ("sampling.max_new_token", "32", "sampling.max_new_tokens"),
    ("optim.lrr", "1e-4", "optim.lr"),
    ("samplng.max_new_tokens", "32", "sampling"),  # a section name
    ("train.lr", "1e-4", "optim.lr"),  # the name in another section
    ("model.lora.rnk", "4", "model.lora.rank"),  # a section that may be null
])
def test_an_unknown_key_says_which_key_it_probably_meant(key, value, meant, tmp_path):
    head, *rest = key.split(".")
    nested = value
    for part in reversed(rest):
        nested = f"{{{part}: {nested}}}"
    recipe = _recipe(tmp_path, f"extends: scalerl\n{head}: {nested}\n", "typo.yaml")
    with pytest.raises(ConfigError) as err:
        load_config(recipe)
    unknown = key if head != "samplng" else "samplng"
    assert str(err.value) == f"unknown config key {unknown!r} in {recipe.resolve()}; did you mean {meant!r}?"
    with pytest.raises(ConfigError) as err:
        load_config("scalerl", [f"{key}={value}"])
    assert str(err.value) == f"unknown config key {unknown!r} in --set {key}; did you mean {meant!r}?"


def test_an_unknown_key_like_no_known_one_suggests_nothing():
    with pytest.raises(ConfigError) as err:
        load_config("scalerl", ["optim.zzzzzz=1"])
    assert str(err.value) == "unknown config key 'optim.zzzzzz' in --set optim.zzzzzz."


def test_a_typo_in_train_is_one_sentence_with_the_guess_and_exit_2(tmp_path, capsys):
    from scalerl.cli import main

    recipe = _recipe(tmp_path, "extends: scalerl\nsampling: {max_new_token: 32}\n", "typo.yaml")
    assert main(["train", "--recipe", str(recipe), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"scalerl train: unknown config key 'sampling.max_new_token' in {recipe.resolve()}; "
                   "did you mean 'sampling.max_new_tokens'?")
    assert not (tmp_path / "run").exists()


def test_a_based_runs_saved_config_leaves_out_the_model_building_fields_and_loads_back_equal(tmp_path):
    import yaml

    from scalerl.config import dump_config

    # scalerl-tools sets model.sft, which a model.base run never uses
    cfg = load_config("scalerl-tools", [f"model.base={tmp_path / 'model'}", "model.preset=micro"])
    saved = yaml.safe_load(dump_config(cfg))
    assert saved["model"]["base"] == str(tmp_path / "model")
    assert not {"preset", "arch", "sft"} & set(saved["model"])
    (tmp_path / "config.yaml").write_text(dump_config(cfg))
    assert load_config(tmp_path / "config.yaml") == cfg
    built = load_config("scalerl-tools")  # a built model keeps them, and its round trip too
    assert yaml.safe_load(dump_config(built))["model"]["sft"]["target_band"] == [0.1, 0.35]
    (tmp_path / "built.yaml").write_text(dump_config(built))
    assert load_config(tmp_path / "built.yaml") == built


def test_a_built_in_recipe_name_wins_over_a_folder_of_the_same_name(tmp_path, monkeypatch, cli_here):
    """Run from a folder holding the clone ``scalerl/``: ``--recipe scalerl`` is the shipped
    recipe, and the command says so in one line."""
    from scalerl.config.layers import RECIPE_DIR, resolve_recipe

    (tmp_path / "scalerl").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_recipe("scalerl") == RECIPE_DIR / "scalerl.yaml"
    with pytest.raises(ConfigError, match="is a folder, not a YAML file"):  # a path is still a path
        resolve_recipe("./scalerl")
    done = cli_here("train", "--recipe", "scalerl", "--set", "no.such.key=1", cwd=tmp_path)
    assert "recipe 'scalerl' is the built-in one; the folder ./scalerl here is not a recipe" in done.stdout
    assert done.returncode == 2 and "is a folder" not in done.stderr
