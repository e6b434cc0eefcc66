"""Bundled SYNTHETIC example curves (not real training data).

They are drawn from the ScaleRL sigmoid with the paper's Table 1 parameters plus
mean@16-over-1,000-prompts noise; ``scripts/make_example_curves.py`` makes them and
``README.md`` here lists each file and its true parameters.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parent


def example_path(name: str) -> Path:
    """The bundled file ``name`` (e.g. ``"synthetic_scalerl_seed0.csv"``)."""
    path = EXAMPLES_DIR / name
    if not path.is_file():
        known = ", ".join(p.name for p in example_files())
        raise FileNotFoundError(f"no bundled example named {name}; the examples are: {known}.")
    return path


def example_files(pattern: str = "synthetic_*") -> list[Path]:
    """Bundled curve files matching ``pattern`` (csv and jsonl), sorted by name."""
    return sorted(p for p in EXAMPLES_DIR.glob(pattern) if p.suffix in (".csv", ".jsonl"))
