"""``constraints-gpu.txt`` resolves, and ``make install-gpu`` ends with a CUDA torch (gpu-review-2
N2, N3).

The static facts need no network: the lock's torch is PyPI's (no ``+cpu``) 2.13.0, its triton is
the one torch 2.13.0 pins, vLLM 0.32.0 with the transformers and setuptools it allows. One test
resolves the lock again with uv, from metadata only, for Python 3.12 on manylinux_2_28 x86_64
against PyPI alone (no pip configuration, so no local +cpu wheel); it skips only when PyPI can't
be reached. ``scripts/check_cuda_torch.py``, install-gpu's last step, is run against a CPU torch.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "constraints-gpu.txt"
INPUT = ROOT / "requirements-gpu.in"
PYPI = "https://pypi.org/simple"


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``{name: version}`` of every ``name==version`` line."""
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
            out[canon(name)] = version.strip()
    return out


def release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.match(r"\d+(?:\.\d+)*", version).group(0).split("."))


def header_command() -> list[str]:
    """The regeneration command that the lock's header records."""
    lines = LOCK.read_text().splitlines()
    commands = [line.lstrip("# ").strip() for line in lines[:5] if line.lstrip("# ").startswith("uv pip compile")]
    assert commands, "constraints-gpu.txt's header does not say how it was made (a `uv pip compile` line)"
    return shlex.split(commands[0])


def makefile_recipe(target: str) -> list[str]:
    """The commands of ``target``'s recipe, continued lines joined."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    out, current = [], ""
    for line in lines[lines.index(f"{target}:") + 1:]:
        if not line.startswith("\t"):
            break
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip() + " "
        else:
            out.append(current)
            current = ""
    return out


def makefile_var(name: str) -> str:
    match = re.search(rf"^{name}\s*:?=\s*(.*)$", (ROOT / "Makefile").read_text(), re.M)
    return match.group(1).strip()


# --- the lock, without network --------------------------------------------------------------

def test_the_lock_pins_pypi_torch_with_its_own_triton():
    lock, wanted = pins(LOCK.read_text()), pins(INPUT.read_text())
    assert "+cpu" not in LOCK.read_text(), "constraints-gpu.txt pins a CPU wheel"
    assert lock["torch"] == wanted["torch"] == "2.13.0"
    # requirements-gpu.in records torch 2.13.0's own pin (its wheel's Requires-Dist on Linux);
    # the resolution below fails if the two disagree, since torch pins triton exactly
    assert wanted["triton"] == "3.7.1"
    assert lock["triton"] == wanted["triton"], (
        f"the lock's triton=={lock['triton']} is not torch {lock['torch']}'s triton=={wanted['triton']}")


def test_the_lock_pins_vllm_032_with_what_it_allows():
    lock = pins(LOCK.read_text())
    assert lock["vllm"] == "0.32.0"
    # vllm 0.32.0's METADATA: transformers>=5.16.1,<5.20 and, on Python > 3.11, setuptools<81
    assert (5, 16, 1) <= release(lock["transformers"]) < (5, 20)
    assert release(lock["setuptools"]) < (81,)
    for name in ("cuda-toolkit", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "six"):  # absent from a +cpu lock
        assert name in lock, f"constraints-gpu.txt has no {name}: it was not resolved with PyPI's CUDA torch"


def test_the_header_command_resolves_what_install_gpu_installs():
    command = header_command()
    options = dict(zip(command, command[1:]))
    assert options["--python-version"] == "3.12"
    assert options["--python-platform"] == "x86_64-manylinux_2_28"
    assert options["--index-url"] == PYPI
    assert "--no-config" in command
    assert options["-o"] == LOCK.name
    extras = {value for flag, value in zip(command, command[1:]) if flag == "--extra"}
    assert extras == set(makefile_var("EXTRAS").split(",")) | {"vllm"}
    assert {"pyproject.toml", INPUT.name} <= set(command)


# --- make install-gpu's end, without network ------------------------------------------------

def test_install_gpu_forces_pypi_torch_then_checks_cuda():
    recipe = makefile_recipe("install-gpu")
    torch_steps = [i for i, line in enumerate(recipe) if "--force-reinstall" in line]
    assert len(torch_steps) == 1, recipe
    torch_line = recipe[torch_steps[0]]
    # no pip configuration at all: here pip's find-links holds torch-2.13.0+cpu, which pip ranks above 2.13.0
    for part in ("PIP_CONFIG_FILE=/dev/null", "--isolated", f"--index-url {PYPI}", "--no-deps", "torch==",
                 "constraints-gpu.txt"):
        assert part in torch_line, f"install-gpu's torch step lacks {part}: {torch_line}"
    installs = [i for i, line in enumerate(recipe) if "-c constraints-gpu.txt" in line]
    checks = [i for i, line in enumerate(recipe) if "scripts/check_cuda_torch.py" in line]
    assert installs and checks, recipe
    assert torch_steps[0] < installs[-1] < checks[-1], "install-gpu must check torch after its last install"


def run_check(python_path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if python_path:
        env["PYTHONPATH"] = python_path
    return subprocess.run([sys.executable, str(ROOT / "scripts/check_cuda_torch.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def fake_torch(tmp_path: Path, version: str, cuda: str | None) -> str:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n\nclass version:\n    cuda = {cuda!r}\n")
    return str(tmp_path)


def test_the_cuda_check_refuses_a_cpu_torch_in_one_sentence(tmp_path):
    run = run_check(fake_torch(tmp_path, "2.13.0+cpu", None))
    assert run.returncode == 1
    sentence = run.stderr.strip()
    assert "\n" not in sentence and sentence.endswith(".") and sentence.count(". ") == 0, sentence
    assert sentence.startswith("install-gpu: torch 2.13.0+cpu is a CPU build") and "make install-gpu" in sentence


def test_the_cuda_check_passes_a_cuda_torch(tmp_path):
    run = run_check(fake_torch(tmp_path, "2.13.0", "13.0"))
    assert run.returncode == 0, run.stderr
    assert "CUDA 13.0" in run.stdout


def test_the_cuda_check_judges_this_venvs_torch():
    import torch

    run = run_check()
    if torch.version.cuda is None:  # the CPU machines' make install
        assert run.returncode == 1 and "is a CPU build" in run.stderr, run.stderr
    else:
        assert run.returncode == 0, run.stderr


# --- the lock resolves (PyPI) ---------------------------------------------------------------

def pypi_unreachable() -> str | None:
    try:  # HEAD: nothing but the status comes back
        urllib.request.urlopen(urllib.request.Request(f"{PYPI}/pip/", method="HEAD"), timeout=5).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (OSError, ValueError) as error:
        return f"PyPI ({PYPI}) is unreachable from here ({error}), so the lock can't be resolved"
    return None


def uv_bin() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        assert found, "uv is not installed: the dev extra brings it (make install)"
        return found


@pytest.mark.timeout(60)
def test_the_lock_resolves_from_pypi_metadata(tmp_path):
    reason = pypi_unreachable()
    if reason:
        pytest.skip(reason)
    command = header_command()
    out = tmp_path / "resolved.txt"
    command[command.index("-o") + 1] = str(out)
    # uv ignores pip's configuration; its own (UV_*, uv.toml) is left out too, so PyPI alone
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("UV_") or k in ("UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT")}
    try:
        run = subprocess.run([uv_bin(), *command[1:], "-c", str(LOCK), "--no-header", "--quiet"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=50)
    except subprocess.TimeoutExpired:
        pytest.fail("uv took over 50 s to resolve constraints-gpu.txt (about 15 s with an empty cache)")
    assert run.returncode == 0, f"constraints-gpu.txt does not resolve:\n{run.stderr[-4000:]}"
    resolved, lock = pins(out.read_text()), pins(LOCK.read_text())
    unpinned = sorted(set(resolved) - set(lock))
    assert not unpinned, f"constraints-gpu.txt is stale, it does not pin {unpinned}: rerun its header's command"
    assert all(resolved[name] == lock[name] for name in resolved)
    assert resolved["torch"] == "2.13.0" and resolved["triton"] == lock["triton"]
