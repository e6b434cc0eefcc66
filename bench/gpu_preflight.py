"""Before the GPU check imports anything: is every wheel it needs on this Python?

Stdlib only, so it runs on a bare machine (the H200 test image has python 3.12, torch,
transformers, numpy, scipy, pyyaml, rich, pytest — and no pydantic). Prints the interpreter,
torch and CUDA versions and the free ``/dev/shm`` (the ``local`` backend's weights live
there), then either nothing more, or one sentence naming exactly the missing packages and the
``pip download`` line that fetches their wheels for Python 3.12 manylinux, with exit code 2.
Pins come from the project's ``constraints.txt``.

Present is not enough: the wheels are installed with ``--no-deps``, so nothing else checks that
the machine's own copies are new enough for them (pydantic 2.14.4 and pydantic_core 2.50.5 need
typing-extensions>=4.16.0). Every installed package of ``NEEDED`` is read with
``importlib.metadata``, and each of its ``Requires-Dist`` on another package of ``NEEDED`` (no
environment marker) is checked against the version installed: one sentence naming the package,
the version found and the one needed, exit code 2.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import re
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


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
                      r"(?:[-_.]?(?:post|rev|r)[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?", re.I)


def version_key(version: str) -> tuple | None:
    """A sortable key for a PEP 440 version (local label dropped), or None if it isn't one."""
    match = _VERSION.fullmatch(version.strip().split("+")[0])
    if not match:
        return None
    release, pre, pre_n, post, dev = match.groups()
    numbers = [int(x) for x in release.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    phase = {"a": 0, "alpha": 0, "b": 1, "beta": 1}.get((pre or "").lower(), 2)  # c, rc, pre, preview
    pre_key = (phase, int(pre_n or 0)) if pre else (3, 0)
    if dev is not None and not pre and post is None:
        pre_key = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    return (tuple(numbers), pre_key, -1 if post is None else int(post or 0),
            float("inf") if dev is None else int(dev or 0))


def satisfies(version: str, specifier: str) -> bool | None:
    """Whether ``version`` meets every clause of ``specifier`` (``>=4.16.0,<5``), or None if
    either can't be read here (then nothing is claimed)."""
    found = version_key(version)
    if found is None:
        return None
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = re.fullmatch(r"(~=|==|!=|<=|>=|<|>)\s*(\S+)", clause)  # not ===, arbitrary equality
        if not match:
            return None
        op, wanted = match.groups()
        if op in ("==", "!=") and wanted.endswith(".*"):  # == 2.50.*
            prefix = version_key(wanted[:-2])
            if prefix is None:
                return None
            n = len(wanted[:-2].split("."))
            same = (found[0] + (0,) * n)[:n] == (prefix[0] + (0,) * n)[:n]
            ok = same == (op == "==")
        else:
            need = version_key(wanted)
            if need is None:
                return None
            ok = {"==": found == need, "!=": found != need, ">=": found >= need, "<=": found <= need,
                  ">": found > need, "<": found < need, "~=": found >= need}[op]
            if op == "~=":  # ~=4.16.0: >=4.16.0 and 4.16.*
                release = re.match(r"v?(\d+(?:\.\d+)*)", wanted).group(1).split(".")[:-1]
                ok = ok and found[0][:len(release)] + (0,) * (len(release) - len(found[0])) == tuple(map(int, release))
        if not ok:
            return False
    return True


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;()]*)\)?\s*(?:;(.*))?")


def too_old(installed: dict[str, tuple[str, list[str]]]) -> list[tuple[str, str, str, str]]:
    """Each unmet requirement among ``installed`` (``{distribution: (version, Requires-Dist
    lines)}``) as ``(distribution, version found, requirement, who needs it)``, for example
    ``("typing_extensions", "4.12.2", "typing-extensions>=4.16.0", "pydantic 2.14.4")``.
    Requirements with an environment marker are not checked (the standard library has no
    marker evaluator, and none of NEEDED's requirements on each other has one)."""
    by_name = {_canon(dist): (dist, version) for dist, (version, _) in installed.items()}
    out = []
    for dist, (version, requires) in installed.items():
        for line in requires:
            match = _REQUIREMENT.fullmatch(line)
            if not match or match.group(3) or not match.group(2).strip():
                continue
            name, specifier = match.group(1), match.group(2).replace(" ", "")
            if _canon(name) not in by_name or _canon(name) == _canon(dist):
                continue
            other, found = by_name[_canon(name)]
            if satisfies(found, specifier) is False:
                out.append((other, found, name + specifier, f"{dist} {version}"))
    return out


def installed() -> dict[str, tuple[str, list[str]]]:
    """``{distribution: (version, Requires-Dist lines)}`` for each package of NEEDED found."""
    out = {}
    for dist in NEEDED.values():
        try:
            meta = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        out[dist] = (meta.version, list(meta.requires or ()))
    return out


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
    old = too_old(installed())
    if old:
        versions = {_canon(dist): version for dist, version in pins().items()}
        grouped: dict[tuple[str, str], dict[str, list[str]]] = {}  # (dist, found) -> {need: [who]}
        for dist, version, need, who in old:
            grouped.setdefault((dist, version), {}).setdefault(need, []).append(who)
        found = " and ".join(
            f"{dist} {version} (" + ", ".join(f"{' and '.join(who)} need{'s' * (len(who) == 1)} {need}"
                                              for need, who in needs.items()) + ")"
            for (dist, version), needs in grouped.items())
        wanted = []  # constraints.txt's pin where it meets the need, else the need itself
        for (dist, _), needs in grouped.items():
            pin = versions.get(_canon(dist))
            specifier = ",".join(need[len(_REQUIREMENT.match(need).group(1)):] for need in needs)
            ok = dist != "torch" and pin and satisfies(pin, specifier)
            wanted.append(f"{dist}=={pin}" if ok else " ".join(f"'{need}'" for need in needs))
        print(f"scripts/gpu_check.sh: this Python has {found}; fetch the wheels with `pip download "
              f"--only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --no-deps -d wheels "
              f"{' '.join(dict.fromkeys(wanted))}` and install them with `pip install --no-index --no-deps "
              f"wheels/*.whl`.", file=sys.stderr)
        return 2
    import torch

    cuda = torch.version.cuda or "none"
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"torch {torch.__version__}, CUDA {cuda}, {gpus} GPU(s) visible")
    return 0


if __name__ == "__main__":
    sys.exit(main())
