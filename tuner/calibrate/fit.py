"""Bounded least squares of the simulator's Efficiency constants against measurements.

The fit is shared by `tuner calibrate` (engine step times, request latencies) and by refits from
confirmed measurements (`tuner.calibrate.refit`). Parameters are log(value / start value), so
every constant moves in relative terms and its bounds (Efficiency's plausibility bounds for the
fractions, wide positive ranges for the overheads) become box bounds. Residuals are
log(predicted / measured): a 10% miss counts the same on a 1 ms step as on a 1 s request.

Which constants a set of measurements identifies depends on which roofline terms are active in
them, so nothing is special-cased: after a first fit of every candidate, an ordered
Gram-Schmidt pass over the Jacobian at the solution keeps the columns that carry independent
information (a constant that
moves no prediction, or only moves it the way a kept one does, e.g. per-step and per-layer
overhead on one model) and puts the others back at their start values before the final fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from tuner.calibration_schema import Residual
from tuner.perf.efficiency import MAX_BANDWIDTH_FRACTION, MAX_FLOPS_FRACTION, Efficiency

__all__ = ["FITTABLE", "FitResult", "Predictor", "fit_efficiency", "residual_summary"]

# Candidate constants and their (low, high) bounds. Fractions: Efficiency's plausibility bounds
# (a lower bound keeps the log parameter finite). Overheads: positive, far beyond any real engine.
FITTABLE: dict[str, tuple[float, float]] = {
    "weight_bandwidth_fraction": (1e-3, MAX_BANDWIDTH_FRACTION),
    "kv_bandwidth_fraction": (1e-3, MAX_BANDWIDTH_FRACTION),
    "gemm_flops_fraction": (1e-3, MAX_FLOPS_FRACTION),
    "attention_flops_fraction": (1e-3, MAX_FLOPS_FRACTION),
    "step_overhead_s": (1e-7, 1.0),
    "seq_step_overhead_s": (1e-9, 0.1),
    "layer_overhead_s": (1e-9, 0.1),
    "request_overhead_s": (1e-6, 10.0),
}
# A Jacobian column counts as independent information when the part of it the constants kept
# before it do not explain has at least this fraction of the largest column's norm.
_RANK_TOLERANCE = 1e-2
# Minimum prior of the first, all-candidates fit: along directions the data cannot tell apart
# (per-step vs per-layer overhead) it keeps the constants in their start proportions instead of
# letting one drift to its bound, which would hide it from the identification that follows.
_EXPLORE_PRIOR = 1e-2
# Extra starts of the final fit, in log(value / start value).
_START_SHIFTS = (0.0, -0.5, 0.5)

Predictor = Callable[[Efficiency], np.ndarray]


@dataclass(frozen=True)
class FitResult:
    """Fitted constants, the full Efficiency they give, and the fit error per quantity."""

    efficiency: Efficiency
    fitted: dict[str, float]  # the identified constants only
    residuals: dict[str, Residual]
    log_errors: np.ndarray  # log(predicted / measured) per measurement, final fit


def residual_summary(log_errors: np.ndarray, kinds: Sequence[str]) -> dict[str, Residual]:
    """Median and 90th-percentile |predicted/measured - 1| of each kind of measurement."""
    rel = np.abs(np.expm1(np.asarray(log_errors, dtype=float)))
    labels = np.asarray(kinds)
    out = {}
    for kind in dict.fromkeys(kinds):
        errs = rel[labels == kind]
        out[kind] = Residual(
            median_abs_rel_error=float(np.median(errs)),
            p90_abs_rel_error=float(np.percentile(errs, 90)),
            count=int(errs.size),
        )
    return out


class _Problem:
    """The residual function of one fit: log parameters -> log(predicted / measured)."""

    def __init__(
        self, predict: Predictor, measured: np.ndarray, start: Efficiency, names: Sequence[str]
    ) -> None:
        self.predict, self.start, self.names = predict, start, list(names)
        self.log_measured = np.log(np.asarray(measured, dtype=float))
        self.base = np.array([_clip(n, getattr(start, n)) for n in self.names])
        self.lower = np.log([FITTABLE[n][0] for n in self.names] / self.base)
        self.upper = np.log([FITTABLE[n][1] for n in self.names] / self.base)

    def efficiency(self, x: np.ndarray, active: Sequence[int]) -> Efficiency:
        """Start constants with the active parameters set from `x` (same order as `active`)."""
        # Clipped: base * exp(log(bound / base)) can land one rounding step past the bound.
        values = {
            self.names[i]: _clip(self.names[i], float(self.base[i] * np.exp(v)))
            for i, v in zip(active, x, strict=True)
        }
        return replace(self.start, **values)

    def residuals(self, x: np.ndarray, active: Sequence[int]) -> np.ndarray:
        """log(predicted / measured) at parameters `x` of the `active` constants."""
        predicted = np.asarray(self.predict(self.efficiency(x, active)), dtype=float)
        return np.log(np.maximum(predicted, 1e-12)) - self.log_measured

    def cost(self, x: np.ndarray, active: Sequence[int], prior: float) -> float:
        """The objective at `x`: squared log errors plus the prior's squared terms."""
        return float(np.sum(self.residuals(x, active) ** 2) + np.sum((prior * x) ** 2))

    def solve(
        self, active: Sequence[int], x0: np.ndarray, diff_step: float, prior: float
    ) -> np.ndarray:
        """Bounded trust-region least squares over the active parameters from `x0`."""
        if not active:
            return np.zeros(0)
        lo, hi = self.lower[list(active)], self.upper[list(active)]

        def fun(x: np.ndarray) -> np.ndarray:
            # The prior: a log-parameter's distance from its start value, as one more residual.
            return np.concatenate([self.residuals(x, active), prior * x])

        result = least_squares(
            fun,
            np.clip(x0, lo, hi),
            bounds=(lo, hi),
            method="trf",
            diff_step=diff_step,
            x_scale=1.0,
            max_nfev=60 * (len(active) + 1),
            ftol=1e-12,
            xtol=1e-10,
            gtol=1e-12,
        )
        return np.asarray(result.x)

    def identified(self, x: np.ndarray, diff_step: float) -> list[int]:
        """Indices of the constants whose Jacobian columns at `x` carry independent information."""
        every = list(range(len(self.names)))
        r0 = self.residuals(x, every)
        jac = np.empty((r0.size, len(every)))
        for j in every:
            step = x.copy()
            step[j] += diff_step if x[j] + diff_step <= self.upper[j] else -diff_step
            jac[:, j] = (self.residuals(step, every) - r0) / (step[j] - x[j])
        return _independent_columns(jac)


def _independent_columns(jac: np.ndarray) -> list[int]:
    """Columns kept in order, each only if what it adds beyond the kept ones is not negligible.

    Greedy in FITTABLE order, so of two constants that move predictions the same way the one
    listed first is fitted (per-step overhead before per-layer overhead), deterministically.
    """
    scale = float(np.linalg.norm(jac, axis=0).max()) if jac.size else 0.0
    keep: list[int] = []
    basis = np.zeros((jac.shape[0], 0))
    for j in range(jac.shape[1]):
        column = jac[:, j]
        if basis.shape[1]:
            column = column - basis @ (basis.T @ column)
        norm = float(np.linalg.norm(column))
        if scale > 0 and norm >= _RANK_TOLERANCE * scale:
            keep.append(j)
            basis = np.column_stack([basis, column / norm])
    return keep


def _clip(name: str, value: float) -> float:
    low, high = FITTABLE[name]
    return min(max(value, low), high)


def fit_efficiency(
    predict: Predictor,
    measured: Sequence[float] | np.ndarray,
    kinds: Sequence[str],
    start: Efficiency,
    names: Sequence[str] = tuple(FITTABLE),
    *,
    diff_step: float = 0.01,
    prior: float = 0.0,
) -> FitResult:
    """Fit the constants `names` so `predict(eff)` matches `measured` (log errors, bounded).

    `predict` maps an Efficiency to one predicted value per measurement (same units);
    constants the measurements do not identify keep their `start` values. `prior` > 0 adds
    prior * log(value / start) per constant as a residual: with few measurements, a constant
    then moves only as far as the data pay for (a factor e costs as much as a miss of
    prior in log error).
    """
    unknown = [n for n in names if n not in FITTABLE]
    if unknown:
        raise ValueError(f"not fittable efficiency constants: {', '.join(unknown)}")
    problem = _Problem(predict, np.asarray(measured, dtype=float), start, names)
    every = list(range(len(problem.names)))
    first = problem.solve(every, np.zeros(len(every)), diff_step, max(prior, _EXPLORE_PRIOR))
    keep = problem.identified(first, diff_step)
    # Refit from the first solution with the unidentified constants back at their start values.
    # The roofline's max() terms make local minima: solve from the first fit, the start values
    # and every constant a factor 1.65 below / above them, and keep the best.
    starts = [first[keep], *(np.full(len(keep), s) for s in _START_SHIFTS)]
    x = min(
        (problem.solve(keep, x0, diff_step, prior) for x0 in starts),
        key=lambda x: problem.cost(x, keep, prior),
    )
    eff = problem.efficiency(x, keep)
    log_errors = problem.residuals(x, keep)
    fitted = {problem.names[i]: float(getattr(eff, problem.names[i])) for i in keep}
    return FitResult(eff, fitted, residual_summary(log_errors, kinds), log_errors)
