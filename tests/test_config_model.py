"""``model.lora``: targets are ``auto`` (the default) or a list of layer names."""

import pytest

from scalerl.config import ConfigError, load_config
from scalerl.config.runtime import lora_spec


@pytest.mark.parametrize("lora, targets", [("{rank: 4}", None), ("{targets: auto}", None),
                                           ("{targets: [c_attn, c_fc]}", ("c_attn", "c_fc"))])
def test_targets_are_auto_or_names(lora, targets):
    cfg = load_config("scalerl", [f"model.lora={lora}"])
    assert lora_spec(cfg).targets == targets  # None: found from the model at start


def test_one_bare_name_is_one_sentence():
    with pytest.raises(ConfigError, match=r"model.lora.targets is auto or a list of layer names, such as \[c_attn\]"):
        load_config("scalerl", ["model.lora={targets: c_attn}"])
