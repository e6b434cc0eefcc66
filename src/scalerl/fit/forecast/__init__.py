"""The forecast's one home: ``Forecast``, made by ``forecast_of`` from a run's log, a cut and
the options, and read by every command, record and page (``docs/design/fit.md``, "One forecast").

- ``log``: the run's log as a forecast reads it (``RunLog``, ``read_logs``);
- ``options``: ``ForecastOptions``, every default of how a forecast is made;
- ``make``: ``forecast_of``, the one function;
- ``value``: ``Forecast`` and its answers (``At``; ``reach.Reach``; ``holdout.Heldout``);
- ``states``: rising, not learning, too few evaluations, declining, diverging;
- ``draws``: the predictive distribution (draws of whole future runs); ``crossing``: when a
  draw's read reaches a target;
- ``companion``: the training reward the validation follows; ``rise``: is the run rising at
  all; ``late``: runs that looked flat and rose later;
- ``record``: the ``forecast_*`` fields of a live run's records.

Nothing here imports a command or a front end.
"""

from scalerl.fit.forecast.log import RunLog, read_logs
from scalerl.fit.forecast.make import forecast_of
from scalerl.fit.forecast.options import ForecastOptions
from scalerl.fit.forecast.value import At, Forecast

__all__ = ["At", "Forecast", "ForecastOptions", "RunLog", "forecast_of", "read_logs"]
