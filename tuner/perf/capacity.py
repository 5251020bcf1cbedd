"""Capacity: the highest load at which every SLA bound holds at its percentile.

The search is one bracketing routine for every backend: `find_capacity` takes a `probe(load)`
callable (the simulator here; a running engine in the measured backends, started once and reused
for every probe), brackets the SLA boundary and bisects it to `rel_tol` within a probe budget
(count and seconds). It then bisects a second boundary, the SLA tightened by the headroom margin,
reusing every probe already made: that load is the recommended operating point. Every probe is
kept as a `LoadPoint`, so one search also yields the variant's latency-vs-load ladder.

Load is an open-loop Poisson rate (req/s per replica) by default, or closed-loop users.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from tuner.bench.stats import BUDGET_CUT
from tuner.perf.bands import Band, band_for, grid_point, meets_banded
from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.load import (
    FIRST_PROBE_RPS,
    LADDER_FRACTIONS,
    Capacity,
    LoadMode,
    LoadPoint,
    ProbeBudget,
    steady_sized,
    workload_at,
)
from tuner.perf.memory import replica_gpus
from tuner.perf.predict import predict_metrics
from tuner.sla import SLA_HEADROOM, meets_sla, tightened
from tuner.specs import SLA, Context, EngineConfig, Metrics, Workload

__all__ = [
    "find_capacity",
    "max_rate_meeting_sla",
    "measured_capacity",
    "predicted_capacity",
    "sim_capacity",
]


# The lowest rate probed, as a fraction of the saturated rate (effectively one request at a time).
_LOW_FRACTION = 0.01
# Measured backends know no saturated rate in advance: they grow the load by this factor until
# the SLA breaks (or the probe budget ends).
_GROWTH = 4.0
# A ladder load within this fraction of the capacity load of a probe is not probed again.
_LADDER_GAP = 0.1


def _point(
    load: float, m: Metrics, sla: SLA, roomy: SLA, mode: LoadMode, tp: int, roomy_load: float
) -> LoadPoint:
    # Open loop: the offered rate is the load the SLA was met at; closed loop: what the users drew.
    rps = load if mode == "rate" else m.requests_per_s
    # At steady state served output tok/s = served req/s x mean output tokens; the window's own
    # tok/s also counts how fast its last requests drain, which is not what the user buys.
    window_tok_s = m.output_tokens_per_s or m.output_tokens_per_s_per_gpu * tp
    steady = (
        rps / tp * window_tok_s / m.requests_per_s
        if m.requests_per_s > 0
        else m.output_tokens_per_s_per_gpu
    )
    return LoadPoint(
        load=load,
        requests_per_s_per_gpu=rps / tp,
        output_tokens_per_s_per_gpu=steady,
        window_output_tokens_per_s_per_gpu=m.output_tokens_per_s_per_gpu,
        ttft_ms=m.ttft_ms,
        tpot_ms=m.tpot_ms,
        meets_sla=meets_sla(m, sla),
        meets_headroom=meets_sla(m, roomy) and load <= roomy_load,
    )


class _Search:
    """Probe bookkeeping of one capacity search: budget, results, brackets."""

    def __init__(
        self,
        probe: Callable[[float], Metrics],
        sla: SLA,
        cap: Capacity,
        budget: ProbeBudget,
        integer: bool,
        roomy_load: float,
        band: Callable[[Metrics], Band] | None = None,
    ) -> None:
        self.probe, self.sla, self.cap, self.budget, self.band = probe, sla, cap, budget, band
        self.roomy, self.roomy_load = tightened(sla, cap.headroom), roomy_load
        self.integer = integer
        self.started = time.perf_counter()
        self.failed_run: Metrics | None = None

    def spent(self) -> bool:
        over_time = (
            self.budget.max_seconds is not None
            and time.perf_counter() - self.started >= self.budget.max_seconds
        )
        return self.cap.probes >= self.budget.max_probes or over_time

    def run(self, load: float) -> LoadPoint | None:
        """Probe `load` (None once the budget is spent or the variant cannot run)."""
        if self.integer:
            load = float(max(1, round(load)))
        known = [p for p in self.cap.points if p.load == load]
        if known:
            return known[0]
        if self.spent():
            self.cap.budget_exhausted = True
            return None
        m = self.probe(load)
        self.cap.probes += 1
        self.cap.probe_s = time.perf_counter() - self.started
        if m.extra.get(BUDGET_CUT):  # the budget ended inside this probe: a partial measurement
            self.cap.budget_exhausted = True
            return None
        if not m.feasible:
            self.failed_run = m
            return None
        p = _point(
            load,
            m,
            self.sla,
            self.roomy,
            self.cap.mode,
            self.cap.tensor_parallel_size,
            self.roomy_load,
        )
        if self.band is not None:
            p.band = self.band(m)
            p.meets_band = meets_banded(m, self.sla, p.band)
        self.cap.points.append(p)
        self.cap.points.sort(key=lambda q: q.load)
        return p

    def bracket(self, ok: Callable[[LoadPoint], bool]) -> tuple[float | None, float | None]:
        """(highest passing load, lowest failing load above it) among the probes so far."""
        passing = [p.load for p in self.cap.points if ok(p)]
        lo = max(passing) if passing else None
        failing = [p.load for p in self.cap.points if not ok(p) and (lo is None or p.load > lo)]
        return lo, (min(failing) if failing else None)

    def narrow(self, ok: Callable[[LoadPoint], bool]) -> None:
        """Bisect the boundary of `ok` between its bracket ends to the tolerance."""
        while True:
            lo, hi = self.bracket(ok)
            if lo is None or hi is None:
                return
            if hi - lo <= (1.0 if self.integer else self.budget.rel_tol * lo):
                return
            mid = 0.5 * (lo + hi)
            if self.integer and round(mid) in (lo, hi):
                return
            if self.run(mid) is None:
                return


def find_capacity(
    probe: Callable[[float], Metrics],
    sla: SLA,
    *,
    mode: LoadMode,
    low: float,
    high: float | None = None,
    tensor_parallel_size: int = 1,
    budget: ProbeBudget | None = None,
    headroom: float = SLA_HEADROOM,
    operating_point: bool = True,
    band: Callable[[Metrics], Band] | None = None,
) -> tuple[Capacity, Metrics | None]:
    """Bracket and bisect the highest load meeting `sla` (and `sla` less `headroom`).

    With `band` (a prediction's error band at a probe), the operating point must also meet the
    SLA with each latency inflated by its band: a third bisection, below the headroom point.

    `high` is the saturated load (the simulator knows it): no load above it is probed, and in
    rate mode the operating point also stays `headroom` below it; without it the load grows by a
    factor until the SLA breaks. Returns the search and, when the variant could
    not run at all, the infeasible Metrics that said why. `operating_point=False` stops at the
    SLA boundary (no headroom bisection, no ladder fill): the capacity alone, fewest probes.
    """
    cap = Capacity(mode=mode, tensor_parallel_size=tensor_parallel_size, headroom=headroom)
    # A known saturated rate also bounds the operating point: at utilisation 1 a queue has no
    # margin for a burst, so the headroom applies to the load as well as to the latencies.
    roomy_load = (1.0 - headroom) * high if mode == "rate" and high is not None else math.inf
    s = _Search(probe, sla, cap, budget or ProbeBudget(), mode == "users", roomy_load, band)
    first = s.run(low)
    if first is None or not first.meets_sla:
        return cap, s.failed_run
    if high is not None:
        s.run(high)
    else:
        load = low
        while s.bracket(lambda p: p.meets_sla)[1] is None and not s.spent():
            load *= _GROWTH
            if s.run(load) is None:
                break
    s.narrow(lambda p: p.meets_sla)
    if operating_point:
        s.narrow(lambda p: p.meets_headroom)
        if band is not None:
            s.narrow(lambda p: p.meets_headroom and p.meets_band)
        _fill_ladder(s)
    return cap, s.failed_run


def _fill_ladder(s: _Search) -> None:
    """Probe the ladder fractions of the capacity load that no earlier probe lies near."""
    top = s.cap.at_sla
    if top is None:
        return
    for fraction in LADDER_FRACTIONS:
        target = fraction * top.load
        if any(abs(p.load - target) <= _LADDER_GAP * top.load for p in s.cap.points):
            continue
        if s.run(target) is None:
            return


def measured_capacity(
    measure: Callable[[Context], Metrics],
    config: EngineConfig,
    ctx: Context,
    *,
    mode: LoadMode,
    budget: ProbeBudget | None = None,
) -> tuple[Capacity, Metrics]:
    """Capacity with no saturation estimate: `measure(ctx at load)` runs one probe (on an engine
    the caller keeps up); returns the search and the Metrics at the capacity load (of the
    lightest load when none meets the SLA; the infeasible Metrics when a probe could not run)."""
    runs: dict[float, Metrics] = {}

    def probe(load: float) -> Metrics:
        runs[load] = measure(
            ctx.model_copy(update={"workload": workload_at(ctx.workload, mode, load)})
        )
        return runs[load]

    low = FIRST_PROBE_RPS if mode == "rate" else 1.0
    cap, failed = find_capacity(
        probe, ctx.sla, mode=mode, low=low, budget=budget, tensor_parallel_size=replica_gpus(config)
    )
    top = cap.at_sla
    return cap, failed or runs[top.load if top else min(runs)]


def sim_capacity(
    config: EngineConfig,
    ctx: Context,
    *,
    eff: Efficiency | None = None,
    mode: LoadMode = "rate",
    budget: ProbeBudget | None = None,
    operating_point: bool = True,
) -> tuple[Capacity, Metrics]:
    """The simulator's capacity search for `config`, and its Metrics at the capacity load.

    The Metrics are those of the highest load meeting the SLA (of the lightest load when none
    does, so the miss can be reported); infeasible when the variant cannot run at all.
    """
    eff = resolve_efficiency(eff, ctx.gpu)

    def band(m: Metrics) -> Band:
        return band_for(ctx.gpu, grid_point(config, ctx.workload, m))

    return predicted_capacity(
        lambda wl: predict_metrics(config, ctx, eff, wl),
        replica_gpus(config),  # GPUs of the replica: per-GPU rates divide by it
        ctx,
        mode=mode,
        budget=budget,
        operating_point=operating_point,
        band=band,
    )


def predicted_capacity(
    predict: Callable[[Workload], Metrics],
    gpus: int,
    ctx: Context,
    *,
    mode: LoadMode = "rate",
    budget: ProbeBudget | None = None,
    operating_point: bool = True,
    band: Callable[[Metrics], Band] | None = None,
    saturated_rps: float | None = None,
) -> tuple[Capacity, Metrics]:
    """Capacity search over a simulated deployment of `gpus` GPUs: `predict(workload)` runs it.

    `saturated_rps` (rate mode): a known bound on the rate the deployment can serve (the
    saturated rate of a stage every request passes), used instead of the burst's.
    """
    wl = ctx.workload
    if saturated_rps is not None and mode == "rate":
        # Probes are sized for the longest stay the SLA allows; the lightest load tells
        # whether the deployment runs at all.
        saturated = predict(steady_sized(workload_at(wl, mode, _LOW_FRACTION * saturated_rps), 1))
        residence_s = (ctx.sla.tpot_ms or saturated.tpot_ms.mean) * wl.output_tokens / 1e3
    else:
        # Saturation: every measured request's user starts at once, no warm-up (a burst).
        burst = workload_at(wl, "users", wl.measured_requests).model_copy(
            update={"warmup_requests": 0, "ramp_s": 0.0}
        )
        saturated = predict(burst)
        residence_s = saturated.tpot_ms.mean * wl.output_tokens / 1e3
    if not saturated.feasible or saturated.requests_per_s <= 0:
        return Capacity(mode=mode, tensor_parallel_size=gpus), saturated
    if mode == "rate":
        sat = saturated_rps or saturated.requests_per_s
        # Past the saturated rate the queue grows without bound (no steady state), however good
        # a finite probe's latencies look: that rate is the top of the bracket.
        low, high = _LOW_FRACTION * sat, sat
    else:
        low, high = 1.0, float(wl.measured_requests)
    runs: dict[float, Metrics] = {}

    def probe(load: float) -> Metrics:
        at = workload_at(wl, mode, load)
        if mode == "rate":
            at = steady_sized(at, load * residence_s)
        runs[load] = predict(at)
        return runs[load]

    # Without a latency bound every load passes: capacity is the saturated end of the bracket.
    cap, failed = find_capacity(
        probe,
        ctx.sla,
        mode=mode,
        low=low,
        high=high,
        tensor_parallel_size=gpus,
        budget=budget,
        operating_point=operating_point,
        band=band,
    )
    if failed is not None:
        return cap, failed
    cap.saturated_load = high if mode == "rate" else None
    best = cap.at_sla
    return cap, runs[best.load if best else min(runs)]


def max_rate_meeting_sla(
    config: EngineConfig,
    ctx: Context,
    *,
    eff: Efficiency | None = None,
    budget: ProbeBudget | None = None,
) -> float:
    """Requests/s per GPU at the highest Poisson rate meeting `ctx.sla` (0 if none does)."""
    cap, _ = sim_capacity(config, ctx, eff=eff, mode="rate", budget=budget, operating_point=False)
    return cap.rps_per_gpu
