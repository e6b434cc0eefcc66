"""``FitOptions``' defaults are the only ones: ``level`` and ``margin`` are written once
(``fit.options.LEVEL``, ``MARGIN``), and every other default of either reads them."""

from __future__ import annotations

import inspect

from scalerl.fit.options import LEVEL, MARGIN, FitOptions


def test_one_level_and_one_margin_default():
    from scalerl.config.evaluation import ForecastConfig
    from scalerl.experiments.report import write_report
    from scalerl.fit.forecast.rise import rise
    from scalerl.fit.plot import plot_fit
    from scalerl.fit.prior.posterior import PriorForecast
    from scalerl.fit.report import BANDS

    assert (FitOptions().level, FitOptions().margin) == (LEVEL, MARGIN) == (0.95, 0.02)
    # the config imports nothing of fit: its defaults mirror these, and this holds them together
    fields = ForecastConfig.model_fields
    assert (fields["level"].default, fields["margin"].default) == (LEVEL, MARGIN)
    assert inspect.signature(plot_fit).parameters["level"].default == LEVEL
    assert inspect.signature(rise).parameters["level"].default == LEVEL
    assert PriorForecast.__dataclass_fields__["level"].default == LEVEL
    assert inspect.signature(write_report).parameters["margin"].default == MARGIN
    assert BANDS.startswith(f"Intervals are at {LEVEL:.0%} unless stated")
