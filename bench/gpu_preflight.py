"""Before the GPU check imports anything: is every wheel it needs on this Python?

Stdlib only, so it runs on a bare machine (the H200 test image has python 3.12, torch,
transformers, numpy, scipy, pyyaml, rich, pytest — and no pydantic). Prints the interpreter,
torch and CUDA versions and the free ``/dev/shm`` (the ``local`` backend's weights live
there), then either nothing more, or one sentence naming exactly the missing packages and the
``pip download`` line that fetches their wheels for Python 3.12 manylinux, with exit code 2.
Pins come from the project's ``constraints.txt``.
"""

from __future__ import annotations

import importlib.util
import platform
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEEDED = {  # import name -> distribution name in constraints.txt
    "torch": "torch", "transformers": "transformers", "tokenizers": "tokenizers", "safetensors": "safetensors",
    "numpy": "numpy", "scipy": "scipy", "yaml": "PyYAML", "rich": "rich", "jinja2": "Jinja2",
    "pydantic": "pydantic", "pydantic_core": "pydantic_core", "annotated_types": "annotated-types",
    "typing_inspection": "typing-inspection", "typing_extensions": "typing_extensions", "pytest": "pytest",
    "pytest_timeout": "pytest-timeout",
}
"""What ``bench/gpu_check.py`` and the ``gpu`` tests import, beyond the standard library."""


def pins() -> dict[str, str]:
    """``{distribution: version}`` from constraints.txt (local version labels dropped)."""
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            out[name.strip().lower()] = version.split("+")[0].strip()
    return out


def missing() -> list[str]:
    return [dist for module, dist in NEEDED.items() if importlib.util.find_spec(module) is None]


def free_shm() -> str:
    try:
        return f"{shutil.disk_usage('/dev/shm').free / 2**30:.1f} GiB"
    except OSError:
        return "none (no /dev/shm)"


def main() -> int:
    print(f"python {platform.python_version()} at {sys.executable}; /dev/shm free: {free_shm()}")
    lost = missing()
    if lost:
        versions = pins()
        # torch is the machine's own CUDA build: never fetch the pinned CPU one
        wanted = " ".join(d if d == "torch" else f"{d}=={versions.get(d.lower(), '')}".rstrip("=") for d in lost)
        print(f"scripts/gpu_check.sh: this Python lacks {', '.join(lost)}; fetch the wheels with `pip download "
              f"--only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --no-deps -d wheels "
              f"{wanted}` and install them with `pip install --no-index --no-deps wheels/*.whl`.", file=sys.stderr)
        return 2
    import torch

    cuda = torch.version.cuda or "none"
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"torch {torch.__version__}, CUDA {cuda}, {gpus} GPU(s) visible")
    return 0


if __name__ == "__main__":
    sys.exit(main())
