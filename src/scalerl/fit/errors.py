"""The one error type of ``scalerl.fit`` and the input checks that raise it.

Every message is one sentence that names the source (file), the column and the point
(row) where they are known, so the CLI can print it as is and exit with code 2.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EXIT_BAD_INPUT", "CurveError", "CurveWarning", "validate_curve"]

EXIT_BAD_INPUT = 2
"""Every ``scalerl`` command's exit code for bad input (said in one sentence, no traceback).
Here, at the bottom of the package, so each command module can name it without importing
the command line that imports them."""


class CurveError(ValueError):
    """A compute/reward curve that cannot be fitted, with a one-sentence reason."""


class CurveWarning(UserWarning):
    """A curve that was read with a caveat (a torn log tail); one sentence, naming the file."""


def _where(source: str | None) -> str:
    return f"{source}: " if source else ""


def validate_curve(
    compute,
    reward,
    *,
    bounded: bool = True,
    source: str | None = None,
    strict: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Check one curve and return it as two float arrays ``(n,)``.

    Raises ``CurveError`` for: mismatched or empty arrays, NaN/inf, negative compute,
    compute that does not increase from point to point (``strict=False`` allows ties,
    for pooled seeds), and, when ``bounded``, rewards outside [0, 1] (pass rates).
    Points are numbered from 0 in the order given.
    """
    where = _where(source)
    try:
        c = np.asarray(compute, dtype=float).reshape(-1)
        r = np.asarray(reward, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise CurveError(f"{where}compute and reward must be numbers ({exc}).") from None
    if c.size != r.size:
        raise CurveError(
            f"{where}the compute column has {c.size} values but the reward column has {r.size}."
        )
    if c.size == 0:
        raise CurveError(f"{where}the curve is empty: there is no point to fit.")
    for name, arr in (("compute", c), ("reward", r)):
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise CurveError(
                f"{where}the {name} column has a non-finite value ({arr[bad[0]]}) at point {bad[0]}."
            )
    neg = np.flatnonzero(c < 0)
    if neg.size:
        raise CurveError(f"{where}the compute column is negative ({c[neg[0]]}) at point {neg[0]}.")
    step = np.diff(c)
    bad = np.flatnonzero(step <= 0 if strict else step < 0)
    if bad.size:
        i = bad[0] + 1
        order = "increase" if strict else "not decrease"
        raise CurveError(
            f"{where}compute must {order} from point to point, but point {i} "
            f"(compute={c[i]:g}) follows point {i - 1} (compute={c[i - 1]:g})."
        )
    if bounded:
        out = np.flatnonzero((r < 0) | (r > 1))
        if out.size:
            raise CurveError(
                f"{where}the reward column is {r[out[0]]:g} at point {out[0]}, outside [0, 1] "
                "(pass bounded=False for rewards that are not pass rates)."
            )
    return c, r
