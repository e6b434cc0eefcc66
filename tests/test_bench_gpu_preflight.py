"""``bench/gpu_preflight.py`` checks versions, not just presence (gpu-review-2 N6): pydantic 2.14.4
and pydantic_core 2.50.5 need typing-extensions>=4.16.0, and a GPU image's older copy is one
sentence with exit 2, naming the package, the version found and the one needed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("gpu_preflight", ROOT / "bench/gpu_preflight.py")
preflight = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(preflight)

PYDANTIC = ["annotated-types>=0.6.0", "pydantic-core==2.50.5", "typing-extensions>=4.16.0",
            "typing-inspection>=0.4.4", 'email-validator>=2.0.0; extra == "email"']


@pytest.mark.parametrize("version, specifier, expected", [
    ("4.12.2", ">=4.16.0", False), ("4.16", ">=4.16.0", True), ("4.16.0", ">=4.16.0", True),
    ("2.50.5", "==2.50.5", True), ("2.50.6", "==2.50.5", False), ("0.23.3", ">=0.23.1,<0.24.0", True),
    ("0.24.0", ">=0.23.1,<0.24.0", False), ("2.11.0+cu130", ">=2.11", True), ("4.16.9", "~=4.16.0", True),
    ("4.17.0", "~=4.16.0", False), ("4.99", "~=4.16", True), ("5.0", "~=4.16", False),
    ("2.50.9", "==2.50.*", True), ("2.51.0", "==2.50.*", False), ("1.0rc1", ">=1.0", False),
    ("1.0.dev1", "<1.0a1", True), ("1.0.post1", ">1.0", True),
    ("not-a-version", ">=1", None), ("1.0", "===1.0", None),  # unreadable here: nothing claimed
])
def test_versions_are_compared_as_pep_440(version, specifier, expected):
    assert preflight.satisfies(version, specifier) is expected


def test_an_old_typing_extensions_is_named_with_who_needs_what():
    installed = {"pydantic": ("2.14.4", PYDANTIC), "pydantic_core": ("2.50.5", ["typing-extensions>=4.16.0"]),
                 "annotated-types": ("0.8.0", []), "typing-inspection": ("0.4.5", ["typing-extensions>=4.15.0"]),
                 "typing_extensions": ("4.12.2", [])}
    assert preflight.too_old(installed) == [
        ("typing_extensions", "4.12.2", "typing-extensions>=4.16.0", "pydantic 2.14.4"),
        ("typing_extensions", "4.12.2", "typing-extensions>=4.16.0", "pydantic_core 2.50.5"),
        ("typing_extensions", "4.12.2", "typing-extensions>=4.15.0", "typing-inspection 0.4.5"),
    ]
    installed["typing_extensions"] = ("4.16.0", [])
    assert preflight.too_old(installed) == []
    installed["pydantic_core"] = ("2.41.5", ["typing-extensions>=4.14.1"])  # pydantic pins its core exactly
    assert preflight.too_old(installed) == [("pydantic_core", "2.41.5", "pydantic-core==2.50.5", "pydantic 2.14.4")]


def test_markers_extras_and_packages_outside_the_list_are_not_checked():
    installed = {"pydantic": ("2.14.4", ['typing-extensions>=9; python_version < "3.13"',
                                         'email-validator>=99; extra == "email"', "unlisted>=99"]),
                 "typing_extensions": ("4.16.0", [])}
    assert preflight.too_old(installed) == []


def test_this_venv_meets_what_its_packages_declare():
    """The project's own pins agree, and pydantic's real METADATA is what is read."""
    installed = preflight.installed()
    assert "typing-extensions>=4.16.0" in [r.replace(" ", "") for r in installed["pydantic"][1]]
    assert preflight.too_old(installed) == []


def test_the_gpu_image_with_an_old_typing_extensions_stops_in_one_sentence(tmp_path):
    """The machine's typing_extensions 4.12.2 shadows this venv's (its METADATA first on the path)."""
    info = tmp_path / "typing_extensions-4.12.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: typing_extensions\nVersion: 4.12.2\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "bench/gpu_preflight.py"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    sentence = run.stderr.strip()
    assert "\n" not in sentence and sentence.endswith("."), sentence
    assert ("this Python has typing_extensions 4.12.2 (pydantic 2.14.4 and pydantic_core 2.50.5 need "
            "typing-extensions>=4.16.0, typing-inspection 0.4.5 needs typing-extensions>=4.15.0);") in sentence
    assert "-d wheels typing_extensions==4.16.0`" in sentence  # constraints.txt's pin, which meets it
    assert "torch" not in run.stdout  # stopped before importing anything
