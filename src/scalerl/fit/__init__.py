"""scalerl.fit: fit, bound and extrapolate the ScaleRL sigmoid law (numpy + scipy only).

Paper §1, Eq. 1: ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)``. Nothing here imports
torch, nor anything of scalerl but ``runfolder`` (the run folder's names and reader).

The forecast (``Forecast``, made by ``forecast_of`` from a ``RunLog`` with ``ForecastOptions``) is
the one answer every command and page reads: every band, crossing and probability is its.
"""

from scalerl.fit.calibrate import Calibration, assess
from scalerl.fit.errors import CurveError, validate_curve
from scalerl.fit.fitting import (
    PAPER_A_GRID,
    PAPER_C_MID_GRID,
    FitResult,
    fit_points,
    fit_sigmoid,
)
from scalerl.fit.forecast import Forecast, ForecastOptions, RunLog, forecast_of, read_logs
from scalerl.fit.law import (
    compute_for_reward,
    efficiency_transform,
    power_law,
    power_law_d,
    sigmoid,
)
from scalerl.fit.options import FitOptions
from scalerl.fit.powerlaw import PowerLawResult, fit_power_law
from scalerl.fit.resample import BootstrapResult, PooledFit, bootstrap, pooled_fit
from scalerl.fit.uncertainty import Uncertainty

__all__ = [
    "PAPER_A_GRID",
    "PAPER_C_MID_GRID",
    "BootstrapResult",
    "Calibration",
    "CurveError",
    "FitOptions",
    "FitResult",
    "Forecast",
    "ForecastOptions",
    "PooledFit",
    "PowerLawResult",
    "RunLog",
    "Uncertainty",
    "assess",
    "bootstrap",
    "compute_for_reward",
    "efficiency_transform",
    "fit_points",
    "fit_power_law",
    "fit_sigmoid",
    "forecast_of",
    "pooled_fit",
    "read_logs",
    "power_law",
    "power_law_d",
    "sigmoid",
    "validate_curve",
]
