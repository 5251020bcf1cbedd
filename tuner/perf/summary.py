"""Turn a simulated run into `Metrics`, with vLLM `bench serve` definitions.

Only measured requests count: the warm-up requests (the first `result.warmup` indices, see
`tuner.bench.arrivals`) load the engine but enter no statistic. TTFT = first token - arrival;
TPOT = (E2E - TTFT) / (output tokens - 1) per request; ITL pooled over the steps of the measured
window (weighted, since a run of identical steps is stored once with its batch as weight);
throughput over the measured window (first measured arrival to last measured completion);
goodput = measured requests meeting every SLA bound per second.
"""

from __future__ import annotations

import numpy as np

from tuner.metrics import PERCENTILES, percentiles_ms
from tuner.perf.memory import MemoryPlan
from tuner.perf.scheduler import SimResult
from tuner.sla import requests_meet_sla
from tuner.specs import SLA, Metrics, Percentiles

__all__ = ["summarize", "weighted_percentiles_ms"]

MS = 1e3


def weighted_percentiles_ms(values_s: np.ndarray, weights: np.ndarray) -> Percentiles:
    """Percentiles of samples that each stand for `weight` identical observations."""
    if values_s.size == 0 or weights.sum() <= 0:
        return Percentiles()
    order = np.argsort(values_s, kind="stable")
    v, w = values_s[order] * MS, weights[order]
    cum = np.cumsum(w)
    total = cum[-1]
    idx = np.searchsorted(cum, np.asarray(PERCENTILES) / 100.0 * total, side="left")
    p50, p90, p95, p99 = v[np.minimum(idx, v.size - 1)]
    return Percentiles(mean=float((v * w).sum() / total), p50=p50, p90=p90, p95=p95, p99=p99)


def summarize(
    result: SimResult,
    plan: MemoryPlan,
    sla: SLA,
    num_gpus: int,
    backend: str = "sim",
) -> Metrics:
    """Metrics of the measured requests of one run (latencies in ms, rates per second)."""
    keep = slice(result.warmup, None)
    arrival, finish = result.arrival_s[keep], result.finish_s[keep]
    ttft = result.first_token_s[keep] - arrival
    e2e = finish - arrival
    queue = result.scheduled_s[keep] - arrival
    out = result.output_tokens[keep]
    multi = out > 1
    tpot = np.zeros_like(e2e)
    tpot[multi] = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    duration = max(float(finish.max() - arrival.min()), 1e-12)
    n = out.size
    ok = requests_meet_sla(ttft, tpot, sla)
    out_tps = float(out.sum()) / duration
    itl_values, itl_weights = result.itl_samples()
    return Metrics(
        feasible=True,
        backend=backend,
        ttft_ms=percentiles_ms(ttft),
        tpot_ms=percentiles_ms(tpot[multi]),
        itl_ms=weighted_percentiles_ms(itl_values, itl_weights),
        e2e_ms=percentiles_ms(e2e),
        queue_ms=percentiles_ms(queue),
        output_tokens_per_s=out_tps,
        output_tokens_per_s_per_gpu=out_tps / num_gpus,
        total_tokens_per_s=float(out.sum() + result.prompt_tokens[keep].sum()) / duration,
        requests_per_s=n / duration,
        goodput_rps=float(ok.sum()) / duration,
        num_requests=n,
        warmup_requests=result.warmup,
        failed_requests=0,
        weights_gib=plan.weights_gib,
        kv_capacity_tokens=plan.kv_capacity_tokens,
        max_concurrent_seqs=plan.max_concurrent_seqs,
        preemptions=result.preemptions,
        kv_utilization=min(1.0, result.kv_peak_fraction),
        extra={
            "duration_s": duration,
            "engine_steps": result.num_steps,
            "decode_runs": result.num_decode_runs,
            "kv_mean_utilization": min(1.0, result.kv_mean_fraction),
            "prefill_tokens_computed": result.prefill_tokens_computed,
            "sla_met_fraction": float(ok.mean()),
        },
    )
