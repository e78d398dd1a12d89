"""Fit the uncertain constants to measured TTFTs: least squares on log TTFT, intervals from
the fit's Jacobian, and the error on rows the fit saw and on rows it did not.

What this module owns: :func:`calibrate` (rows and fields in, :class:`Calibration` out),
:func:`split` (the held-out rows), :func:`errors` (the error summary) and the
:class:`Calibration` and :class:`Estimate` records the report and the profile are made
from.

The model: log(measured_i) = log(kvsim_i(theta)) + e_i, e_i independent with one
variance. :func:`scipy.optimize.least_squares` (trust-region reflective, bounded)
minimises the sum of squared log ratios over the fit rows, each field moving in its unit
coordinate u in [0, 1] (its documented range; kvsim/calibrate/fields.py) from the
scenario's value. The Jacobian is forward differences of step :data:`STEP` in u (a
simulation's TTFT moves in small jumps where batches form differently: a step of 2% of a
field's range sees through them), stepping inward at an upper bound. Intervals: s^2 =
(residual sum of squares) / (n - k) over the n fit rows and k fields, the covariance
s^2 (J'J)^-1 in u, +- t(0.975, n - k) standard errors, mapped to values (so a duration's
interval is even in ratio) and cut at the documented range (said, as ``clipped``). A field
at a bound of its range has no such interval (the optimum is not interior): it is
warned about.

Before fitting, each field's column of the Jacobian at the start is checked: a field no
fit row's TTFT moves by 1% over its whole range cannot be fitted from these rows (exit 2
when named by ``--fit``; a default is left out at the scenario's value, and said). Each
step of the fit simulates the fit rows only; the held-out rows are run at the start and
at the fit. Errors are |predicted / measured - 1| (median, and the share of rows within
1.25x either way), before (the scenario's values) and after, on the fit and the held-out
rows. "The held-out error is much larger than the fit's" is a test, not a ratio of two
medians of a handful of noisy rows: each held-out log error over its predictive standard
deviation s (1 + j' (J'J)^-1 j)^(1/2) (the fit's noise plus the fitted values'
uncertainty, j the row's own Jacobian), squared and averaged, is F(m, n - k) distributed
when the held-out rows follow the fitted model; over its 99% point, a warning.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

from kvsim import api
from kvsim.calibrate.fields import Field, resolve, scenario_composition
from kvsim.calibrate.predict import Predictor, pool
from kvsim.calibrate.rows import TIERS, Row
from kvsim.errors import InputError

STEP = 0.02  # finite-difference step in a field's unit coordinate
FLAT = 0.01  # a field moving no fit row's log TTFT by more than this over its range: unfit
WITHIN = 1.25  # the "within 1.25x" band
AT_BOUND = 1e-3  # u this close to 0 or 1: at a bound


@dataclass(frozen=True)
class Estimate:
    """A fitted value with its 95% interval (``lo95``, ``hi95``), whether the interval
    was cut at the documented range, and the bound the value sits at (or None)."""

    field: Field
    value: float
    lo95: float
    hi95: float
    clipped: bool
    at_bound: str | None


@dataclass(frozen=True)
class Errors:
    """|predicted / measured - 1| over some rows: its median and the share within 1.25x."""

    rows: int
    median: float
    within: float


@dataclass
class Calibration:
    """Everything a calibration found (see the module docstring)."""

    scenario: str
    rows: list[Row]
    held_out: list[bool]
    estimates: list[Estimate]
    before: np.ndarray  # each row's prediction at the scenario's values (s)
    after: np.ndarray  # ... at the fitted values (s)
    served: list[str]  # the tier kvsim served each row's cached tokens from (fitted)
    dof: int
    rms: float  # root mean square log residual of the fit rows (after)
    evaluations: int
    seconds: float
    seed: int
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # the held-out check: (F, its 99% point), None without held-out rows
    held_out_f: tuple[float, float] | None = None

    @property
    def fields(self) -> list[Field]:
        return [e.field for e in self.estimates]

    def errors(self, which: str, when: str) -> Errors:
        """``which``: "fit" or "held-out" rows; ``when``: "before" or "after"."""
        mask = np.array(self.held_out) if which == "held-out" else ~np.array(self.held_out)
        pred = self.before if when == "before" else self.after
        measured = np.array([r.ttft_s for r in self.rows])
        return errors(pred[mask], measured[mask])


def errors(predicted: np.ndarray, measured: np.ndarray) -> Errors:
    """The error summary of predictions against measurements."""
    if len(measured) == 0:
        return Errors(0, math.nan, math.nan)
    ratio = np.asarray(predicted) / np.asarray(measured)
    within = (ratio <= WITHIN) & (ratio >= 1 / WITHIN)
    return Errors(len(ratio), float(np.median(np.abs(ratio - 1))), float(np.mean(within)))


def split(rows: Sequence[Row], holdout: float, seed: int) -> list[bool]:
    """Which rows are held out: ``holdout`` of each tier's rows (rounded), chosen at
    random under ``seed``, so that the fit and the check both see every tier."""
    if not 0 <= holdout < 1:
        raise InputError(f"expected a share in [0, 1), got {holdout:g}", where="--holdout")
    rng = np.random.default_rng(seed)
    out = [False] * len(rows)
    for tier in ("none", *TIERS):
        idx = [i for i, r in enumerate(rows) if r.tier == tier]
        take = round(holdout * len(idx))
        for i in rng.permutation(idx)[:take] if take else []:
            out[int(i)] = True
    return out


def calibrate(
    scenario: str,
    rows: Sequence[Row],
    fit: Sequence[str] | None = None,
    *,
    overrides: Sequence[str] = (),
    holdout: float = 0.3,
    seed: int | None = None,
    max_requests: int = 100,
    max_evaluations: int = 60,
    workers: int = 1,
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """Fit ``fit`` (None: the defaults) to ``rows`` on the scenario file (see the module
    docstring). Deterministic: the same inputs and seed give the same fit."""
    start = time.perf_counter()
    say = log or (lambda _msg: None)
    sc = api.load(scenario, list(overrides))
    comp = scenario_composition(sc, scenario)
    fields, notes = resolve(fit, sc, comp)
    rng_seed = sc.seed if seed is None else seed
    held = split(rows, holdout, rng_seed)
    fit_idx = [i for i, h in enumerate(held) if not h]
    held_idx = [i for i, h in enumerate(held) if h]
    if len(fit_idx) <= len(fields):
        raise InputError(
            f"{len(fit_idx)} rows to fit ({len(rows)} read, {len(held_idx)} held out) for "
            f"{len(fields)} fields ({', '.join(f.name for f in fields)}): a fit needs more "
            "rows than fields (give more rows, fewer fields or a smaller --holdout)",
            where="--fit",
        )
    if max_requests < 1:
        raise InputError(f"expected at least 1, got {max_requests}", where="--max-requests")
    logs = np.log([r.ttft_s for r in rows])
    with pool(min(workers, len(rows))) as p:

        def predictor(idx: list[int]) -> Predictor:
            chosen = [rows[i] for i in idx]
            return Predictor(
                scenario, overrides, seed, fields, chosen,
                max_requests=max_requests, pool=p, workers=workers, log=say,
            )  # fmt: skip

        fit_pred = predictor(fit_idx)
        held_pred = predictor(held_idx) if held_idx else None
        u0 = np.array([f.to_u(f.value) for f in fields])
        fitted = _fit_rows(
            fit_pred, fields, logs[fit_idx], u0, fit is not None, notes, say, max_evaluations
        )
        v0 = [f.value for f in fields]
        v1 = [f.from_u(u) for f, u in zip(fields, fitted.u, strict=True)]
        before, after = np.empty(len(rows)), np.empty(len(rows))
        served = [""] * len(rows)
        parts = [(fit_idx, fit_pred)] + ([(held_idx, held_pred)] if held_pred else [])
        for idx, pred in parts:
            before[idx] = pred(v0)
            after[idx] = pred(v1)
            for i, o in zip(idx, pred.outcomes(v1), strict=True):
                served[i] = o.served
        check = None
        if held_pred is not None:
            check = _held_out_check(held_pred, fitted, fields, logs[held_idx])
    cal = Calibration(
        scenario=scenario,
        rows=list(rows),
        held_out=held,
        estimates=fitted.estimates,
        before=before,
        after=after,
        served=served,
        dof=len(fit_idx) - len(fitted.estimates),
        rms=fitted.rms,
        evaluations=fit_pred.evaluations + (held_pred.evaluations if held_pred else 0),
        seconds=time.perf_counter() - start,
        seed=rng_seed,
        notes=notes,
        held_out_f=check,
    )
    cal.warnings = warnings(cal)
    return cal


@dataclass
class _Fitted:
    u: np.ndarray  # every field's coordinate (a field left out: at the scenario's value)
    kept: list[int]  # the fields fitted
    estimates: list[Estimate]
    rms: float
    jac: np.ndarray  # the fit rows' Jacobian at the fit, fitted fields only
    s2: float
    dof: int


def _fit_rows(
    predictor: Predictor,
    fields: list[Field],
    measured: np.ndarray,
    u0: np.ndarray,
    explicit: bool,
    notes: list[str],
    say: Callable[[str], None],
    max_evaluations: int,
) -> _Fitted:
    """The least-squares fit of the predictor's rows (their log TTFTs ``measured``); a
    field no row depends on left out at its start value (see the module docstring)."""
    full = np.clip(u0, 0.0, 1.0)

    def residual(u: np.ndarray, kept: list[int]) -> np.ndarray:
        x = full.copy()
        x[kept] = u
        return np.log(predictor([f.from_u(v) for f, v in zip(fields, x, strict=True)])) - measured

    def jacobian(u: np.ndarray, kept: list[int]) -> np.ndarray:
        r0 = residual(u, kept)
        cols = []
        for j in range(len(u)):
            h = STEP if u[j] + STEP <= 1 else -STEP
            step = u.copy()
            step[j] += h
            cols.append((residual(step, kept) - r0) / h)
        return np.column_stack(cols)

    everything = list(range(len(fields)))
    start = jacobian(full, everything)
    kept = []
    for j, f in enumerate(fields):
        if np.max(np.abs(start[:, j])) >= FLAT:
            kept.append(j)
            continue
        why = (
            f"no fit row's TTFT moves by 1% over its whole range ({f.text(f.lo)} to {f.text(f.hi)})"
        )
        if explicit:
            raise InputError(f"cannot be fitted from these rows: {why}", where=f"--fit {f.name}")
        notes.append(f"{f.name} left out: {why}")
    if not kept:
        raise InputError("no field to fit: no fit row depends on any of them", where="--fit")
    say(f"fitting {', '.join(fields[j].name for j in kept)} to {len(measured)} rows")
    res = optimize.least_squares(
        lambda u: residual(u, kept),
        full[kept],
        jac=lambda u: jacobian(u, kept),
        bounds=(0.0, 1.0),
        method="trf",
        x_scale=1.0,
        xtol=1e-3,
        ftol=1e-4,
        gtol=1e-8,
        # (max_nfev counts residual calls; each Jacobian costs k more evaluations)
        max_nfev=max(3, max_evaluations // (len(kept) + 1)),
    )
    u = np.clip(res.x, 0.0, 1.0)
    r = residual(u, kept)
    jac = jacobian(u, kept)
    dof = len(measured) - len(kept)
    s2 = float(r @ r) / dof
    se = _standard_errors(jac, s2)
    t = float(stats.t.ppf(0.975, dof))
    estimates = []
    for j, x, e in zip(kept, u, se, strict=True):
        f = fields[j]
        lo_u, hi_u = x - t * e, x + t * e
        bound = "lo" if x <= AT_BOUND else "hi" if x >= 1 - AT_BOUND else None
        estimates.append(
            Estimate(
                f,
                f.from_u(x),
                f.from_u(lo_u),
                f.from_u(hi_u),
                clipped=bool(lo_u < 0 or hi_u > 1),
                at_bound=bound,
            )
        )
    out = full.copy()
    out[kept] = u
    return _Fitted(out, kept, estimates, math.sqrt(float(r @ r) / len(r)), jac, s2, dof)


def _held_out_check(
    predictor: Predictor, fitted: _Fitted, fields: list[Field], measured: np.ndarray
) -> tuple[float, float]:
    """(F, its 99% point): the held-out rows' squared log errors over their predictive
    variance s^2 (1 + j' (J'J)^-1 j), averaged; F(m, n - k) distributed when the held-out
    rows follow the fitted model with the fit rows' noise."""

    def logs(u: np.ndarray) -> np.ndarray:
        return np.log(predictor([f.from_u(v) for f, v in zip(fields, u, strict=True)]))

    base = logs(fitted.u)
    cols = []
    for j in fitted.kept:
        h = STEP if fitted.u[j] + STEP <= 1 else -STEP
        step = fitted.u.copy()
        step[j] += h
        cols.append((logs(step) - base) / h)
    jh = np.column_stack(cols)
    inv = np.linalg.pinv(fitted.jac.T @ fitted.jac)
    var = fitted.s2 * (1 + np.einsum("ij,jk,ik->i", jh, inv, jh))
    r = base - measured
    f_stat = float(np.mean(r**2 / var)) if fitted.s2 > 0 else math.inf
    return f_stat, float(stats.f.ppf(0.99, len(r), fitted.dof))


def _standard_errors(jac: np.ndarray, s2: float) -> np.ndarray:
    """Standard errors of the coordinates, sqrt(diag(s^2 (J'J)^-1)) by the Jacobian's
    singular values; infinite for a coordinate along a direction the Jacobian does not
    see (a singular value under 1e-8 of the largest)."""
    _, sing, vt = np.linalg.svd(jac, full_matrices=False)
    seen = sing > sing.max() * 1e-8
    var = np.zeros(vt.shape[1])
    for i, s in enumerate(sing):
        weight = vt[i] ** 2
        if seen[i]:
            var += weight / s**2
        else:
            var = np.where(weight > 1e-12, np.inf, var)
    return np.sqrt(var * s2)


def warnings(cal: Calibration) -> list[str]:
    """What the report must warn about (see the module docstring)."""
    out = []
    for e in cal.estimates:
        f = e.field
        if e.at_bound is not None:
            end, side = (f.lo, "lower") if e.at_bound == "lo" else (f.hi, "upper")
            out.append(
                f"{f.name} = {f.text(e.value)} sits at its documented {side} "
                f"bound ({f.text(end)}): the rows want a value outside the range, and its "
                "interval (which assumes an optimum inside it) is not to be trusted"
            )
        elif e.clipped and e.lo95 <= f.lo * (1 + 1e-9) and e.hi95 >= f.hi * (1 - 1e-9):
            out.append(
                f"{f.name}: its 95% interval spans its whole documented range: these rows "
                "hardly constrain it"
            )
    fit_err = cal.errors("fit", "after")
    held = cal.errors("held-out", "after")
    if cal.held_out_f is not None and cal.held_out_f[0] > cal.held_out_f[1]:
        out.append(
            f"the held-out rows' errors (median {held.median:.1%}) are much larger than the "
            f"fit rows' (median {fit_err.median:.1%}) and their noise explain (F = "
            f"{cal.held_out_f[0]:.1f} > {cal.held_out_f[1]:.1f}, its 99% point): the fit "
            "does not carry over to runs it did not see (too many fields for the rows, or "
            "rows kvsim models differently)"
        )
    for r, s in zip(cal.rows, cal.served, strict=True):
        if r.tier != "none" and s != r.tier:
            out.append(
                f"{r.where}: its cached tokens are in {r.tier}, but kvsim's run served them "
                f"from {s} (the scenario's tiers do not hold the prefix where the row says)"
            )
    return out
