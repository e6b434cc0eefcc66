"""The typed trainer config: recipes load, overrides are typed, bad input is one clear sentence."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scalerl.config import Config, ConfigError, load_config, parse_override, recipe_names

PAPER_RECIPES = {"scalerl", "deepseek-grpo", "qwen-dapo", "magistral", "minimax-m1"}
LOO = {"loo-plan", "loo-lp", "loo-batch", "loo-8op", "loo-fp32", "loo-savg", "loo-dapo", "loo-npr"}


def test_every_preset_ships_and_validates():
    assert PAPER_RECIPES | LOO <= set(recipe_names())
    for name in recipe_names():
        cfg = load_config(name)
        assert cfg.name == name


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
        assert load_config("scalerl", sets).task.knobs == {"path": "p.jsonl"}
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
