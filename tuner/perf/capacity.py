"""Capacity: the highest Poisson request rate whose percentile TTFT and TPOT meet the SLA.

Bracketing search: the saturated (offline) request rate bounds the answer from above; a rate
that meets the SLA bounds it from below; bisection narrows the bracket to `rel_tol`.
"""

from __future__ import annotations

from tuner.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from tuner.perf.predict import predict_metrics
from tuner.specs import SLA, Context, EngineConfig, Metrics

__all__ = ["max_rate_meeting_sla", "meets_sla"]

# The lowest rate probed, as a fraction of the saturated rate (effectively one request at a time).
_LOW_FRACTION = 0.01
# Above saturation the queue grows without bound; probe a little past it to bracket the answer.
_HIGH_FRACTION = 1.1


def meets_sla(metrics: Metrics, sla: SLA) -> bool:
    """Whether feasible `metrics` meet every bound of `sla` at its percentile."""
    if not metrics.feasible:
        return False
    p = sla.percentile
    if sla.ttft_ms is not None and metrics.ttft_ms.at(p) > sla.ttft_ms:
        return False
    return not (sla.tpot_ms is not None and metrics.tpot_ms.at(p) > sla.tpot_ms)


def max_rate_meeting_sla(
    config: EngineConfig,
    ctx: Context,
    *,
    eff: Efficiency = DEFAULT_EFFICIENCY,
    rel_tol: float = 0.03,
    max_probes: int = 14,
) -> float:
    """Requests/s per GPU at the highest Poisson rate meeting `ctx.sla` (0 if none does)."""
    wl = ctx.workload
    tp = config.tensor_parallel_size
    saturated = predict_metrics(
        config,
        ctx,
        eff,
        wl.model_copy(update={"rate_rps": None, "concurrency": wl.measured_requests}),
    )
    if not saturated.feasible or saturated.requests_per_s <= 0:
        return 0.0
    if ctx.sla.is_throughput_only:
        return saturated.requests_per_s / tp

    def ok(rate: float) -> bool:
        probe = wl.model_copy(update={"rate_rps": rate, "concurrency": None})
        return meets_sla(predict_metrics(config, ctx, eff, probe), ctx.sla)

    lo, hi = _LOW_FRACTION * saturated.requests_per_s, _HIGH_FRACTION * saturated.requests_per_s
    if not ok(lo):
        return 0.0
    if ok(hi):
        return hi / tp
    for _ in range(max_probes):
        if hi - lo <= rel_tol * lo:
            break
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo / tp
