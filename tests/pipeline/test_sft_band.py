"""A run or a study never trains from an SFT warm-up that missed its band without being told to:
one sentence naming the band, the pass rate and what to change, or with ``--force`` a warning."""

from __future__ import annotations

import json

import pytest

from scalerl.config import ConfigError, load_config
from scalerl.pipeline.build import checked_band


def _warmed(tmp_path, reached: bool):
    model = tmp_path / "base_model"
    model.mkdir()
    (model / "sft_result.json").write_text(json.dumps({"pass_rate": 0.0, "reached_band": reached, "steps": 44,
                                                       "seconds": 131.0}))  # fmt: skip
    return model


def test_a_missed_band_stops_the_run_with_what_to_change(tmp_path):
    model = _warmed(tmp_path, reached=False)
    with pytest.raises(ConfigError) as err:
        checked_band(load_config("scalerl", []), model)
    said = str(err.value)
    assert said.startswith(f"the SFT warm-up in {model} ended at pass rate 0.000 after 44 steps and 131 s, outside "
                           "its band [0.2, 0.4]")  # fmt: skip
    assert "model.sft.max_steps=2000" in said and "--force" in said and "\n" not in said


def test_force_trains_from_it_and_says_so_and_a_band_reached_says_nothing(tmp_path):
    lines = []
    forced = load_config("scalerl", ["model.sft.force=true"])
    assert checked_band(forced, _warmed(tmp_path, reached=False), lines.append) == tmp_path / "base_model"
    assert len(lines) == 1 and lines[0].startswith("warning: the SFT warm-up") and "(--force)" in lines[0]
    ok = tmp_path / "ok"
    ok.mkdir()
    assert checked_band(load_config("scalerl", []), _warmed(ok, reached=True), lines.append) == ok / "base_model"
    assert len(lines) == 1
