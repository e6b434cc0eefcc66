"""``scalerl report``'s per-axis tables and figures, on stand-in fits (no fitting, no training)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from scalerl.experiments.study import Point, _axis_figure, _axis_tables


def _fitted(batches):
    out = []
    for b in batches:
        point = Point(f"scalerl/batch={b}", (Path(f"/x/batch={b}/seed0"),), {"batch": b})
        run = SimpleNamespace(fit=SimpleNamespace(A=0.5 + b / 100, B=1.0), identified=True,
                              intervals={"A": (0.4, 0.9), "B": (0.8, 1.2)})
        out.append((point, run))
    return out


def test_axis_rows_are_in_numeric_order():
    (table,) = _axis_tables(_fitted([16, 4, 64]))
    assert [row[0] for row in table.rows] == ["4", "16", "64"]  # not "16" < "4" < "64"


def test_axis_figure_is_built_without_pyplot():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    figure = _axis_figure(_fitted([16, 4]), "batch")
    assert figure.png.startswith(b"\x89PNG") and plt.get_fignums() == before  # nothing left open
