"""Studies that choose: which points of a study can still be the best at a compute budget.

The paper's lesson for recipe choice (digest §5, Table 1): a point that leads early can be
overtaken later (bs512, A 0.605 at C_mid 2818, against bs2048, A 0.645 at C_mid 10909), so a
study must not stop points by their current value. It stops them by their forecast at the
budget ``C_b``: each point's one ``Forecast`` (``fit.forecast``, made at the rung with the
budget as its horizon), whose draws ``mu_ij`` of point ``i``'s expected curve at ``C_b`` are
what ``scalerl plan`` and ``fit`` read too.

Points are independent runs, so the chance that point ``i`` is the best at the budget is

    P_i = P(mu_i > max_{l != i} mu_l) ~= mean_j [ mu_{i, pi_i(j)} = max_l mu_{l, pi_l(j)} ]

with each point's draws paired in its own random order ``pi_i`` (the draws of one point are
stratified quantiles in one fixed order; pairing them in that order would make all points
move together). A rising point's draws are its forecast's, which never fall below what it has
already shown (the forecast's floor, ``forecast.draws.shown``), so a study's band for a point
is ``plan``'s for it at that compute. At each **rung** (compute ``first_rung``, then ``eta`` times that, ..., and
the budget), the survivors are cut to the rung, forecast at the budget, and those with
``P_i < threshold`` are stopped; the leader never is. At the budget itself the same rule reads
the band of each survivor's value there: the survivors still above the threshold are **tied**,
within what the forecast can resolve, and are reported as a tie, never broken by noise.

``replay`` applies the policy to finished runs (any trainer's logs that ``scalerl fit``
reads): which points it would have stopped and when, the winner it would have kept, and the
compute it would have used, beside the full study's own winner and ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import ForecastOptions, RunLog, between, forecast_of
from scalerl.fit.forecast.states import MIN_EVALS
from scalerl.fit.readers import Curve
from scalerl.fit.shared_shape import ONE_SHAPE_P, fit_shared_shape, ranks

__all__ = ["MEASURED", "PAIRING", "PAIRINGS", "THRESHOLD", "Decisions", "Standing", "Study", "p_best", "replay",
           "rungs", "shape_pairing", "standing", "winner_text"]

THRESHOLD = 0.1
"""A point is stopped when P(it is the best at the budget) falls below this: the largest of
0.01, 0.02, 0.05, 0.1 and 0.2 whose false stops were at most 5% of the points on the 5 families
of the corpus made first, then scored on the 11 made since (``bench/pruners.py``; ``MEASURED``)."""
MEASURED = ("calibrated on 100 replayed studies of the 5 families of real runs made first (2.8% of the "
            "points stopped although they ended within 0.01 of the best) and scored on 220 of the 11 made "
            "since (3.2%, the winner kept in 91%, at a median 81% of the compute; every loss one late "
            "riser of the code family, stopped at half the budget); over all 320 (bench/pruners.py, "
            "2026-12-06): 3.1% false stops, the winner kept in 93%, at a median 81% of the compute; on "
            "the paper's Table 1, the late winner kept in 10 of 10 at 60%")
"""How the default threshold was chosen and what its stops cost on real runs, said wherever a
study stops points (``scalerl sweep --help``, ``study.md``): its false-stop rate, a false stop
being a stopped point whose value at the budget came within 0.01 of the best (issue 49)."""
PAIRINGS = {
    "independent": "each point's draws in its own random order: the points' futures independent",
    "shared-shape": "the points' draws paired by one fit of them all with one shape (fit.shared_shape): a shape "
                    "they are all unsure of moves them together",
}
"""How ``p_best`` pairs the points' draws: the choices of a study's ``adaptive.pairing`` and of
``scalerl sweep --replay --pairing``, with what each means."""
PAIRING = "independent"
"""The default pairing. ``bench/pruners.py`` scored both on 200 replayed studies of real runs
(2026-12-05), at the threshold 0.1: with the shape always shared, 77% of the compute (mean)
against 82%, but the paper's Table 1 late winner (bs2048, whose C_mid is 4x bs512's: not one
shape) stopped in 2 of 10 studies; with the shape tested first (``shared_shape.ONE_SHAPE_P``),
Table 1 kept in 10 of 10 and 81% of the compute, for 1.8% false stops against 1.4%."""
ETA = 2.0
"""Each rung is this many times the compute of the one before (successive halving's eta)."""
MIN_ETA = 1.5  # rungs closer than this decide on the same evaluations again and again
MAX_RUNGS = 12  # a study of more rungs is refused (the adaptive spec's bound, ``experiments.adaptive``)
FIRST_RUNG = 1.0 / 8.0
"""The first rung as a fraction of the budget, when none is given."""


@dataclass(frozen=True)
class Standing:
    """One point's forecast at the budget, read at a rung."""

    point: str
    at_compute: float  # the compute its data reaches at this rung
    sample: np.ndarray = field(repr=False)  # (n,) its expected curve's draws at the budget (``Forecast.draws_at``)
    source: str  # whose curves the forecast follows (``Forecast.method``)
    state: str = "rising"  # the forecast's state (``fit.forecast.states``)
    band: tuple[float, float, float] = (np.nan, np.nan, np.nan)  # (median, lo, hi): ``Forecast.at(budget)``

    @property
    def median(self) -> float:
        return self.band[0]

    def interval(self, level: float) -> tuple[float, float]:
        """The band on the expected curve at the budget, at the forecast's level (the study's)."""
        return self.band[1], self.band[2]

    def forecast(self, level: float) -> dict:
        lo, hi = self.interval(level)
        return {"median": self.median, "lo": lo, "hi": hi}


def through(curve: Curve, compute: float) -> Curve:
    """The curve up to its first evaluation at or past ``compute``: a run stopped there by
    ``train.max_compute`` ends at the first step past it, and its last evaluation belongs to it."""
    i = min(int(np.searchsorted(curve.compute, compute * (1 - 1e-9))), len(curve) - 1)
    return curve.head(float(curve.compute[i])) if len(curve) else curve


def standing(log: RunLog, budget: float, options: ForecastOptions) -> Standing:
    """``log``'s forecast at ``budget``, made from its evaluations up to the budget's (the data
    past it, if any, is not read: the question is the value at the budget), with the budget
    as its horizon: the draws of its one ``Forecast`` there."""
    seen = through(log.curve, budget)
    if len(seen) < MIN_EVALS:
        raise CurveError(f"{log.curve.source}: {len(seen)} evaluation(s) up to compute {budget:.4g}; "
                         f"a forecast needs {MIN_EVALS}.")  # fmt: skip
    fc = forecast_of(log, cut=float(seen.compute[-1]), options=options.with_(budget=budget))
    at = fc.at(budget)
    return Standing(log.name, fc.cut, fc.draws_at(budget), fc.method, fc.state.name, (at.value, at.lo, at.hi))


def shape_pairing(logs: Sequence[RunLog], budget: float) -> np.ndarray | None:
    """(R, k): the quantile of each of ``logs``' points in each joint draw of their shared
    shape (``shared_shape``), from their evaluations up to the budget's; None where the test
    says they do not share one (``p_best`` then pairs them independently)."""
    seen = [through(log.curve, budget) for log in logs]
    fit = fit_shared_shape([(c.compute, c.reward) for c in seen], budget)
    return ranks(fit) if fit.p_one >= ONE_SHAPE_P else None


def p_best(standings: Sequence[Standing], seed: int = 0, pairing: np.ndarray | None = None) -> dict[str, float]:
    """P(each point is the best at the budget): its draws against the others', each point's
    draws in an independent random order (module docstring), or, given ``pairing`` (R, k):
    the quantile each point's draw takes in each of R joint draws (``shared_shape.ranks``, the
    points in the order of ``standings``). Ties between draws (two flat runs at one value)
    are shared."""
    p = between.p_best([s.sample for s in standings], seed=seed, pairing=pairing)
    return {s.point: v for s, v in zip(standings, p)}


def rungs(budget: float, first_rung: float | None = None, eta: float = ETA) -> list[float]:
    """The computes a study decides at: ``first_rung``, ``eta`` times it, ..., then ``budget``."""
    first = budget * FIRST_RUNG if first_rung is None else float(first_rung)
    if not (np.isfinite(budget) and 0 < first <= budget):
        raise CurveError(f"the first rung ({first:.4g}) must be a positive compute no larger than the budget "
                         f"({budget:.4g}).")  # fmt: skip
    if not eta >= MIN_ETA or np.log(budget / first) / np.log(eta) + 1 > MAX_RUNGS:
        raise CurveError(f"the first rung {first:.4g} and eta {eta:g} make too many rungs to the budget "
                         f"{budget:.4g} (at most {MAX_RUNGS}, eta at least {MIN_ETA:g}); raise the first rung.")  # fmt: skip
    out = [first]
    while out[-1] * eta < budget * (1 - 1e-9):
        out.append(out[-1] * eta)
    if out[-1] < budget:
        out.append(budget)
    return out


@dataclass
class Decisions:
    """What a study decided (``decisions.json``; ``scalerl sweep --replay --json``). While the
    study runs, ``done`` is False, ``under_way`` names the rung being trained and ``winner`` is
    not yet a verdict (a page shows the rung, never a winner, until ``done``)."""

    budget: float
    threshold: float
    rungs: list[float]
    confirm: int = 1
    pairing: str = PAIRING  # how P(best) pairs the points' draws (``PAIRINGS``)
    winner: str | list[str] = ""
    compute_used: float = 0.0
    compute_full: float = 0.0
    stopped: list[dict] = field(default_factory=list)
    rounds: list[dict] = field(default_factory=list)  # per rung: each point's forecast, P(best) and line
    full: dict = field(default_factory=dict)  # the full study: its winner and ranking at the budget
    done: bool = False
    under_way: dict | None = None  # {"rung", "of", "at_compute", "running"} while a rung trains
    undecided: dict = field(default_factory=dict)  # point -> why it had no forecast at the last rung

    def to_dict(self) -> dict:
        out = {"done": self.done, "under_way": self.under_way, "winner": self.winner, "undecided": self.undecided,
                "compute_used": self.compute_used, "compute_full": self.compute_full,
                "fraction_used": self.compute_used / self.compute_full if self.compute_full else None,
                "budget": self.budget, "threshold": self.threshold, "confirm": self.confirm, "pairing": self.pairing,
                "rungs": self.rungs,
                "stopped": self.stopped, "rounds": self.rounds, "full": self.full}  # fmt: skip
        return out | {"winner_text": winner_text(out)}

    def lines(self) -> list[str]:
        """Every rung's lines so far, one per point (``Study.step``)."""
        return [line for r in self.rounds for line in r.get("lines", [])]


def winner_text(d: Mapping) -> str:
    """A study's verdict in words, from its ``decisions.json``: the winner; "tied" only for
    points whose forecasts at the budget cannot be told apart (each P(best) at or above the
    threshold); "undecided" for points never forecast, with why (one home for the sentence:
    ``sweep --replay``, the study report and the page say it alike)."""
    w, never = d.get("winner"), d.get("undecided") or {}
    text = w if isinstance(w, str) else (
        "tied (their forecasts at the budget cannot be told apart): " + ", ".join(w) if w else "")
    if never:
        why = "; ".join(f"{p}: {r}" for p, r in never.items())
        return (f"{text} among the points forecast; undecided: {why}" if text else
                f"undecided: no point could be told from another ({why})")
    return text or "undecided: no point was forecast"


def _iv(f: Mapping) -> str:
    return f"{f['median']:.3f} [{f['lo']:.3f}, {f['hi']:.3f}]"


def decide(standings: Sequence[Standing], threshold: float, level: float,
           pairing: np.ndarray | None = None) -> tuple[dict[str, float], list[dict]]:
    """(P(best) of every point, the ones to stop): below ``threshold``, or ``not_learning``
    while the leader is rising and forecast above it at the budget (a flat point beside a
    learning one that will pass it), never the leader. Where the leader is flat too, or its
    median at the budget is not above the flat point's, no point is stopped for being flat:
    the study cannot tell them apart (``bench/pruners.py``: three flat seeds of one setting, the
    leader's early rise read as "rising" with a median below theirs, were stopped and ended
    within 0.01 of the best). ``pairing``: ``p_best``'s."""
    p = p_best(standings, pairing=pairing)
    leader = max(p, key=p.get)
    best = next(s for s in standings if s.point == leader)
    stop = []
    for s in standings:
        flat = s.state == "not_learning" and best.state == "rising" and best.median > s.median
        if s.point == leader or (p[s.point] >= threshold and not flat):
            continue
        f, lead = s.forecast(level), best.forecast(level)
        why = f"P(best at the budget) = {p[s.point]:.3f} < {threshold:g}" if not flat else "not learning, the leader rising"
        stop.append({"point": s.point, "at_compute": s.at_compute, "forecast": f, "p_best": p[s.point],
                     "leader": leader, "leader_forecast": lead,
                     "reason": f"{why}: forecast {_iv(f)} against the leader {leader}'s {_iv(lead)}"
                               + (f" ({s.state.replace('_', ' ')})" if s.state not in ("rising", "not_learning") else "")})  # fmt: skip
    return p, stop


def tied(p: Mapping[str, float], threshold: float) -> str | list[str]:
    """The winner: the one point left above the threshold, or the tied set, leader first."""
    left = sorted((k for k, v in p.items() if v >= threshold), key=lambda k: -p[k])
    return left[0] if len(left) == 1 else left


class Study:
    """The policy's state over a study: the points still running and each one's compute.

    ``step(rung, curves)`` decides at a rung from each running point's curve up to it;
    ``finish`` names the winner. ``replay`` drives it over finished runs, and ``scalerl sweep
    --adaptive`` (``scalerl.experiments.adaptive``) over runs it trains rung by rung.

    ``confirm``: the rungs in a row a point must be a stop for before it is stopped (1: at once;
    2: the certified pruner's guard, the early ranking agreeing with itself across rungs).
    ``options_of(point, log)``: each point's forecast options (an adaptive study's: its run
    folder's, ``forecast.prior_runs.run_options``, so that its forecast at a rung is ``plan``'s on its
    folder); None: ``options`` for every point (a replay of logs). ``options.level`` is the
    study's.
    ``pairing``: how P(best) pairs the points' draws (``PAIRINGS``; "shared-shape": by their joint
    fit with one shape, issue 49's item 3)."""

    def __init__(self, points: Sequence[str], budget: float, *, first_rung: float | None = None, eta: float = ETA,
                 threshold: float = THRESHOLD, options: ForecastOptions | None = None, confirm: int = 1,
                 pairing: str = PAIRING, standing_of=None, pairing_of=None, options_of=None) -> None:  # fmt: skip
        if pairing not in PAIRINGS:
            raise CurveError(f"pairing {pairing!r} is not one of {', '.join(PAIRINGS)}.")
        self.options = options or ForecastOptions()
        self.standing_of = standing_of or standing  # (log, budget, options) -> Standing; a bench caches it
        self.pairing_of = pairing_of or shape_pairing  # (logs, budget) -> (R, k) quantiles; a bench caches it
        self.options_of = options_of or (lambda point, log: self.options)  # (point, log) -> ForecastOptions
        self.decisions = Decisions(budget, threshold, rungs(budget, first_rung, eta), confirm=max(int(confirm), 1),
                                   pairing=pairing)  # fmt: skip
        self.alive = list(points)
        self.spent = dict.fromkeys(points, 0.0)
        self.p: dict[str, float] = {}  # P(best) at the latest round
        self.strikes = dict.fromkeys(points, 0)  # rungs in a row each point was a stop
        self.waiting: dict[str, str] = {}  # the running points without a forecast at the latest rung, and why

    def step(self, rung: float, logs: Mapping[str, RunLog]) -> list[dict]:
        """Decide at ``rung`` from ``logs`` (each running point's, up to the rung: its
        evaluations and training reward); the points stopped, as ``decisions.json`` lists them.
        Every running point gets one line: stopped, kept or undecided with the reason. At the
        budget nothing is stopped: the survivors ran their whole way, and their P(best) there is
        the verdict."""
        d = self.decisions
        for name in self.alive:
            if name in logs and len(logs[name].curve):
                self.spent[name] = float(logs[name].curve.compute[-1])
        head = f"rung {self._index(rung)}/{len(d.rungs)} at compute {rung:.4g}"
        ready, waiting = self._ready(logs)
        self.waiting = waiting
        lines = {n: f"{head}: {n} undecided: {why}" for n, why in waiting.items()}
        if len(ready) < 2:
            alone = ("kept: the only point left" if len(self.alive) == 1
                     else "undecided: no other point has a forecast to compare it with yet")  # fmt: skip
            lines |= {s.point: f"{head}: {s.point} {alone}" for s in ready}
            d.rounds.append({"at_compute": rung, "forecasts": {}, "lines": [lines[n] for n in self.alive]})
            return []
        pairs = self.pairs([logs[s.point] for s in ready])
        self.p, candidates = decide(ready, d.threshold, self.options.level, pairs)
        final = rung >= d.budget
        stop = [] if final else self._confirmed(candidates, ready)
        gone = {s["point"] for s in stop}
        held = {s["point"]: s for s in candidates if s["point"] not in gone}
        level = self.options.level
        leader = max(self.p, key=self.p.get)
        for s in ready:
            f, p = s.forecast(level), self.p[s.point]
            if s.point in gone:
                c = next(c for c in stop if c["point"] == s.point)
                lines[s.point] = (f"{head}: {s.point} stopped: P(best) {p:.2f}, forecast {_iv(f)} against the "
                                  f"leader's {_iv(c['leader_forecast'])}" + (" (not learning)" if s.state == "not_learning" else ""))  # fmt: skip
            elif s.point in held and not final:
                lines[s.point] = (f"{head}: {s.point} undecided: P(best) {p:.2f}, forecast {_iv(f)}; held until "
                                  f"{d.confirm} rungs in a row agree ({self.strikes[s.point]} so far)")  # fmt: skip
            else:
                role = ("leader" if s.point == leader else f"P(best) {p:.2f} >= {d.threshold:g}" if p >= d.threshold
                        else f"P(best) {p:.2f} < {d.threshold:g}, not the winner")  # at the budget: held, never stopped
                lines[s.point] = f"{head}: {s.point} {'final' if final else 'kept'}: {role}, forecast {_iv(f)}"
        d.rounds.append({"at_compute": rung, "forecasts": {s.point: s.forecast(level) | {"p_best": self.p[s.point]}
                                                           for s in ready},
                         "paired": "independent" if pairs is None else "shared-shape",
                         "lines": [lines[n] for n in self.alive]})  # fmt: skip
        d.stopped.extend(stop)
        self.alive = [n for n in self.alive if n not in gone]
        return stop

    def pairs(self, logs: Sequence[RunLog]) -> np.ndarray | None:
        """How ``p_best`` pairs the draws of ``logs``' points: None for independent draws (the
        "independent" pairing, or points whose one-shape test failed), else ``shape_pairing``'s."""
        d = self.decisions
        return self.pairing_of(list(logs), d.budget) if d.pairing == "shared-shape" else None

    def _index(self, rung: float) -> int:
        rs = self.decisions.rungs
        return 1 + min(range(len(rs)), key=lambda i: abs(rs[i] - rung))

    def _ready(self, logs: Mapping[str, RunLog]) -> tuple[list[Standing], dict[str, str]]:
        """The running points with a forecast at the budget, and why each other one has none."""
        d, ready, waiting = self.decisions, [], {}
        for n in self.alive:
            seen = len(through(logs[n].curve, d.budget)) if n in logs else 0
            if seen < MIN_EVALS:
                waiting[n] = f"{seen} evaluation(s) so far; a forecast needs {MIN_EVALS}"
                continue
            try:
                ready.append(self.standing_of(logs[n], d.budget, self.options_of(n, logs[n])))
            except CurveError as err:
                waiting[n] = str(err).rstrip(".")
        return ready, waiting

    def _confirmed(self, candidates: list[dict], ready: Sequence[Standing]) -> list[dict]:
        """The candidates that were stops ``confirm`` rungs in a row (a point that is not a stop
        at a rung starts again from none)."""
        names = {c["point"] for c in candidates}
        for s in ready:
            self.strikes[s.point] = self.strikes[s.point] + 1 if s.point in names else 0
        return [c for c in candidates if self.strikes[c["point"]] >= self.decisions.confirm]

    def under_way(self, rung: float, running: Sequence[str]) -> None:
        """Mark ``rung`` as being trained by ``running`` (``decisions.json`` says so meanwhile)."""
        self.decisions.under_way = {"rung": self._index(rung), "of": len(self.decisions.rungs),
                                    "at_compute": rung, "running": list(running)}  # fmt: skip

    def finish(self, done: bool = True) -> Decisions:
        """The winner (one point, or the tied set) and the compute the study used; ``done``:
        False while the study still runs (the winner so far is not a verdict)."""
        d = self.decisions
        forecast = {n: self.p[n] for n in self.alive if n in self.p and n not in self.waiting}
        d.undecided = {n: self.waiting[n] for n in self.alive if n in self.waiting}
        if len(self.alive) == 1 and not d.undecided:
            d.winner = self.alive[0]
        else:
            d.winner = tied(forecast, d.threshold) if len(forecast) > 1 else list(forecast)[0] if forecast else []
        d.compute_used = float(sum(self.spent.values()))
        d.done = done
        if done:
            d.under_way = None
        return d


def replay(logs: Sequence[RunLog], budget: float, *, first_rung: float | None = None, eta: float = ETA,
           threshold: float = THRESHOLD, options: ForecastOptions | None = None, confirm: int = 1,
           pairing: str = PAIRING) -> Decisions:
    """The policy on finished runs (module docstring); each must reach ``budget``."""
    curves = [log.curve for log in logs]
    short = [c for c in curves if float(c.compute[-1]) < budget * (1 - 1e-9)]
    if short:
        raise CurveError(f"{short[0].source} ends at compute {float(short[0].compute[-1]):.4g}, before the "
                         f"budget {budget:.4g}: a replay needs every run to reach the budget.")  # fmt: skip
    by_name = {log.name: log for log in logs}
    study = Study(list(by_name), budget, first_rung=first_rung, eta=eta, threshold=threshold, options=options,
                  confirm=confirm, pairing=pairing)
    for rung in study.decisions.rungs:
        study.step(rung, {n: by_name[n].upto(rung) for n in study.alive})
    out = study.finish()
    out.compute_full = float(sum(float(c.head(budget).compute[-1]) for c in curves))
    everyone = [standing(log.upto(budget), budget, study.options) for log in logs]
    p_all = p_best(everyone, pairing=study.pairs([log.upto(budget) for log in logs]))
    out.full = {"winner": tied(p_all, threshold),
                "ranking": [{"point": s.point, **s.forecast(study.options.level), "p_best": p_all[s.point]}
                            for s in sorted(everyone, key=lambda s: -s.median)]}  # fmt: skip
    return out
