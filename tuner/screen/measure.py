"""Measuring a screened tune's variants: each variant's capacity on the real backend, the
simulator's prediction at the same load, and the recommendation from the measurements only."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from tuner.backends import Backend, evaluate_capacity
from tuner.backends.sim import SimBackend
from tuner.perf.load import Capacity, ProbeBudget, workload_at
from tuner.run_spec import RunSpec
from tuner.screen.options import screen_spec
from tuner.screen.variant import ConfirmedVariant, Side
from tuner.specs import Metrics

__all__ = ["gain_over_defaults", "measure_variants", "recommend_measured"]


def _side(cap: Capacity, at: Metrics | None, pct: int) -> Side:
    top = cap.at_sla
    return Side(
        capacity_load=top.load if top else None,
        capacity_rps_per_gpu=cap.rps_per_gpu,
        capacity_tok_s_per_gpu=cap.tok_s_per_gpu,
        ttft_ms=at.ttft_ms.at(pct) if at is not None and at.feasible else None,
        tpot_ms=at.tpot_ms.at(pct) if at is not None and at.feasible else None,
    )


def _compared_load(cap: Capacity) -> float | None:
    top = cap.at_sla
    if top is not None:
        return top.load
    return min(p.load for p in cap.points) if cap.points else None


def _predict(v: ConfirmedVariant, spec: RunSpec) -> None:
    """The simulator's capacity of `v` and its latencies at the load measured."""
    sim, ctx = SimBackend(), spec.context()
    budget = screen_spec(spec).probe_budget
    cap, _ = evaluate_capacity(sim, v.config, ctx, mode=spec.capacity_load, budget=budget)
    at = None
    if v.compared_load is not None:
        wl = workload_at(ctx.workload, spec.capacity_load, v.compared_load)
        at = sim.evaluate(v.config, ctx.model_copy(update={"workload": wl}))
    v.predicted = _side(cap, at, spec.sla.percentile)


def _budget_left(spec: RunSpec, left_s: float | None) -> ProbeBudget:
    """The run's probe budget, its seconds capped by the time the measuring has left."""
    budget = spec.probe_budget
    if left_s is None:
        return budget
    cap = min(budget.max_seconds or math.inf, left_s)
    return budget.model_copy(update={"max_seconds": cap})


def _measure(v: ConfirmedVariant, spec: RunSpec, backend: Backend, left: float | None) -> None:
    """Fill in `v`'s measured capacity, status and compared load."""
    t0 = time.perf_counter()
    cap, metrics = evaluate_capacity(
        backend, v.config, spec.context(), mode=spec.capacity_load, budget=_budget_left(spec, left)
    )
    v.wall_s = round(time.perf_counter() - t0, 1)
    v.capacity, v.metrics = cap, metrics
    v.status = "measured" if metrics.feasible else "infeasible"
    v.reason = metrics.reason
    v.compared_load = _compared_load(cap)
    v.measured = _side(cap, metrics if metrics.feasible else None, spec.sla.percentile)


def measure_variants(
    variants: list[ConfirmedVariant],
    spec: RunSpec,
    backend: Backend,
    seconds: float | None,
    on_variant: Callable[[ConfirmedVariant], None] = lambda v: None,
    *,
    spent: float = 0.0,
) -> None:
    """Measure each variant's capacity in order (filling it in); once `seconds` are spent
    (`spent` of them by earlier rounds) the rest are skipped with the reason. Every variant also
    gets the simulator's prediction; a variant restored from an earlier run's journal is kept as
    it was measured."""
    started = time.perf_counter() - spent
    for v in variants:
        if v.restored:
            on_variant(v)
            continue
        left = None if seconds is None else seconds - (time.perf_counter() - started)
        if left is not None and left <= 0:
            v.status = "skipped"
            v.reason = f"the --confirm-seconds budget ({seconds:g} s) was spent"
        else:
            _measure(v, spec, backend, left)
        _predict(v, spec)
        on_variant(v)


def recommend_measured(variants: list[ConfirmedVariant]) -> ConfirmedVariant | None:
    """The measured variant with the highest capacity (goodput at the SLA); ties: lower TPOT."""
    ok = [v for v in variants if v.meets_sla and v.measured is not None]
    if not ok:
        return None

    def rank(v: ConfirmedVariant) -> tuple[float, float]:
        assert v.measured is not None
        return (v.measured.capacity_tok_s_per_gpu, -(v.measured.tpot_ms or math.inf))

    return max(ok, key=rank)


def gain_over_defaults(
    recommended: ConfirmedVariant | None, baseline: ConfirmedVariant
) -> float | None:
    """recommended / baseline measured capacity - 1 (None when the defaults met no load)."""
    if recommended is None or not baseline.meets_sla or baseline.measured is None:
        return None
    assert recommended.measured is not None
    base = baseline.measured.capacity_tok_s_per_gpu
    return recommended.measured.capacity_tok_s_per_gpu / base - 1.0 if base > 0 else None
