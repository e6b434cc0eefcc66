"""End of a run: fit the sigmoid law to its own validation curve and write a short report.

Reads ``RUN_DIR/metrics.jsonl`` through ``scalerl.fit.io`` exactly as ``scalerl fit`` does
(x = ``compute_gpu_hours``, y = ``val_pass_rate``), fits Eq. 1 with R0 fixed to the first
point (the pass rate of the starting policy), prints the curve, and writes
``RUN_DIR/fit.png`` and ``RUN_DIR/report.md``.
"""

from __future__ import annotations

from pathlib import Path

from scalerl.metrics import read_records


def final_report(run_dir: str | Path, cfg, log=print):
    """Fit, print and write the report; returns the ``FitResult`` (None if the fit failed)."""
    from scalerl.fit.errors import CurveError
    from scalerl.fit.fitting import fit_sigmoid
    from scalerl.fit.io import read_curves

    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    records = [r for r in read_records(metrics) if r.get("val_pass_rate") is not None]
    try:
        curve = read_curves(metrics)[0]
        fit = fit_sigmoid(curve.compute, curve.reward, r0="first", source=str(metrics))
    except CurveError as err:
        log(f"no sigmoid fit: {err}")
        return None
    r0, last = records[0]["val_pass_rate"], records[-1]["val_pass_rate"]
    line = (f"fitted sigmoid: R(C) = {fit.R0:.3f} + ({fit.A:.3f} - {fit.R0:.3f}) / "
            f"(1 + ({fit.C_mid:.4g} / C)^{fit.B:.2f})   [C in device-hours, {fit.n_points} points, "
            f"rmse {fit.rmse:.4f}{', bounds hit: ' + ','.join(fit.bounds_hit) if fit.bounds_hit else ''}]")
    log(f"validation pass rate: {r0:.3f} at step 0 -> {last:.3f} at step {records[-1]['step']} "
        f"({last - r0:+.3f})")
    log(line)
    figure = _figure(fit, curve, run_dir / "fit.png", cfg.name)
    _write_markdown(run_dir / "report.md", cfg, records, fit, line, figure)
    log(f"report: {run_dir / 'report.md'}")
    return fit


def _figure(fit, curve, path: Path, title: str) -> Path | None:
    try:
        from scalerl.fit import plot
    except ImportError:  # matplotlib is the optional ``plots`` extra
        return None
    ax = plot.plot_fit(fit, curve)
    ax.set_title(f"{title}: validation pass rate vs device-hours")
    return plot.save(ax, path)


def _write_markdown(path: Path, cfg, records: list[dict], fit, line: str, figure: Path | None) -> None:
    last = records[-1]
    rows = "\n".join(
        f"| {r['step']} | {r['compute_gpu_hours']:.5f} | {r.get('flops', 0):.3g} | {r['val_pass_rate']:.3f} |"
        for r in records
    )
    text = f"""# {cfg.name}: training report

{cfg.description}

- steps: {last['step']}; device-hours: {last['compute_gpu_hours']:.5f}; FLOPs: {last.get('flops', 0):.3g}
- validation pass rate (mean@{cfg.eval.k}): {records[0]['val_pass_rate']:.3f} -> {last['val_pass_rate']:.3f}
- {line}
- A = {fit.A:.3f}, B = {fit.B:.3f}, C_mid = {fit.C_mid:.4g}, R0 = {fit.R0:.3f}

{f'![fit]({figure.name})' if figure is not None else '(matplotlib not installed: no figure)'}

| step | device-hours | FLOPs | val pass rate |
|---:|---:|---:|---:|
{rows}
"""
    path.write_text(text)
