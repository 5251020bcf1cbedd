"""Plan a fleet: per GPU kind and TP size, the best variant's capacity, then replicas and cost."""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

from tuner.knobs.registry import footprint_knobs, footprint_of
from tuner.perf.bands import band_for, grid_point
from tuner.perf.load import workload_at
from tuner.perf.memory import replica_gpus
from tuner.perf.precision import precision_for
from tuner.perf.predict import predict_metrics
from tuner.plan import sizing
from tuner.plan.disagg_option import disagg_option
from tuner.plan.fit import (
    SIXTEEN_BIT,
    FitCheck,
    check_fit,
    fit_note,
    max_context_tokens,
    smallest_footprint,
    tp_sizes,
)
from tuner.plan.models import KindPlan, Option, PlanRequest, PlanResult
from tuner.plan.search import CapacityChoice, best_capacity_config, knob_grid
from tuner.prices import GPUPrice, PriceTable
from tuner.specs import Context, GPUProfile, Metrics, Quantization

__all__ = ["plan", "plan_kind", "rank_kinds", "size_option"]

_MS = 1e-3
# A band at or past 100% bounds nothing from below; past this the low edge stops shrinking.
_MAX_BAND = 0.9


def _operating_metrics(
    req: PlanRequest, gpu: GPUProfile, choice: CapacityChoice, rate: float
) -> Metrics:
    """Simulate one replica at `rate` requests/s with the chosen variant."""
    tp = replica_gpus(choice.config)
    wl = workload_at(req.workload, "rate", rate)
    ctx = Context(model=req.model, gpu=gpu, sla=req.sla, workload=wl, num_gpus=tp)
    return predict_metrics(choice.config, ctx, workload=wl)


def _target_rps(req: PlanRequest, gpu: GPUProfile, choice: CapacityChoice) -> float:
    """The request rate to serve: given, or users / (think time + E2E at the replica's capacity)."""
    if req.rate_rps is not None:
        return req.rate_rps
    assert req.users is not None
    at_capacity = _operating_metrics(req, gpu, choice, choice.capacity_rps)
    return sizing.offered_rate_rps(req.users, req.think_time_s, at_capacity.e2e_ms.mean * _MS)


def size_option(
    req: PlanRequest,
    gpu: GPUProfile,
    choice: CapacityChoice,
    price: GPUPrice | None,
    fit: str,
    context_tokens: int,
) -> Option:
    """Replicas, GPUs, cost, utilisation, latency and energy of serving the target with `choice`."""
    tp = replica_gpus(choice.config)
    target = _target_rps(req, gpu, choice)
    replicas = sizing.replicas_needed(target, choice.capacity_rps, req.headroom)
    gpus = replicas * tp
    load = sizing.utilisation(target, replicas, choice.capacity_rps)
    at_load = _operating_metrics(req, gpu, choice, target / replicas)
    pct = req.sla.percentile
    out_tps = target * req.workload.output_tokens
    total_tps = target * (req.workload.input_tokens + req.workload.output_tokens)
    money: dict[str, float | None] = dict.fromkeys(
        ("usd_per_gpu_hour", "usd_per_hour", "usd_per_m_output_tokens", "usd_per_m_total_tokens")
    )
    if price is not None:
        hourly = sizing.usd_per_hour(gpus, price.usd_per_gpu_hour)
        money = {
            "usd_per_gpu_hour": price.usd_per_gpu_hour,
            "usd_per_hour": hourly,
            "usd_per_m_output_tokens": sizing.usd_per_million_tokens(hourly, out_tps),
            "usd_per_m_total_tokens": sizing.usd_per_million_tokens(hourly, total_tps),
        }
    band = band_for(gpu, grid_point(choice.config, req.workload, at_load))
    # The band is |measured / predicted - 1| at p90: sized for the low edge, a fleet still holds.
    low_edge = choice.capacity_rps * (1.0 - min(band.throughput, _MAX_BAND))
    return Option(
        capacity_band=band.throughput,
        band_source=band.description,
        replicas_at_band=sizing.replicas_needed(target, low_edge, req.headroom),
        gpu=gpu.name,
        tp=tp,
        config=choice.config,
        capacity_rps_per_replica=choice.capacity_rps,
        target_rps=target,
        replicas=replicas,
        gpus=gpus,
        utilisation=load,
        ttft_ms=at_load.ttft_ms.at(pct),
        tpot_ms=at_load.tpot_ms.at(pct),
        energy_j_per_output_token=sizing.energy_j_per_token(gpus, gpu.tdp_w, load, out_tps),
        max_context_tokens=context_tokens,
        fit=fit,
        evaluations=choice.evaluations,
        **money,
    )


def _option_cost(o: Option) -> tuple[float, float]:
    """Cheapest first; without a price, fewest GPUs first."""
    return (o.usd_per_hour if o.usd_per_hour is not None else math.inf, o.gpus)


def _distinct_quants(req: PlanRequest, gpu: GPUProfile) -> list[Quantization]:
    """The space's quantizations, one per cost signature: the simulator sees only bytes per
    weight, GEMM peak and weight-only-ness, so bf16/fp16 (and AWQ/GPTQ) predict the same."""
    seen: dict[tuple[float, float, bool], Quantization] = {}
    for q in req.space.quantization:
        p = precision_for(q, gpu, req.model.hidden_size)
        seen.setdefault((p.bytes_per_param, p.gemm_tflops, p.weight_only), q)
    return list(seen.values())


def _fits_at(req: PlanRequest, gpu: GPUProfile, tp: int) -> list[FitCheck]:
    """Every footprint (weight x KV precision) of the space, quantizations deduplicated."""
    min_tokens = min(knob_grid(req.space.max_num_batched_tokens))
    allowed = _footprint_values(req)
    allowed["quantization"] = _distinct_quants(req, gpu)
    return [
        check_fit(
            req.model,
            gpu,
            req.workload,
            dict(zip(allowed, combo, strict=True)),
            tp,
            min_batched_tokens=min_tokens,
        )
        for combo in itertools.product(*allowed.values())
    ]


def _footprint_values(req: PlanRequest) -> dict[str, list[Any]]:
    return {k.name: list(getattr(req.space, k.name)) for k in footprint_knobs()}


def _no_fit_reason(req: PlanRequest, gpu: GPUProfile, tps: list[int]) -> str:
    min_tokens = min(knob_grid(req.space.max_num_batched_tokens))
    smallest = smallest_footprint(
        req.model,
        gpu,
        req.workload,
        _footprint_values(req),
        max(tps),
        min_batched_tokens=min_tokens,
    )
    return (
        f"does not fit at any quantization of the search space up to tp={max(tps)} "
        f"(--max-gpus-per-replica {req.max_gpus_per_replica}): {smallest.plan.reason}"
    )


def plan_kind(req: PlanRequest, gpu: GPUProfile, price: GPUPrice | None) -> KindPlan:
    """Search each TP size that fits (ascending, stopping when capacity per GPU falls)."""
    base = KindPlan(gpu=gpu.name, display_name=gpu.display_name, status="no-fit", price=price)
    tps = tp_sizes(req.model, req.max_gpus_per_replica)
    if not tps:
        base.reason = f"no TP size up to {req.max_gpus_per_replica} divides the attention heads"
        return base
    options: list[Option] = []
    fitted_any, prev_per_gpu = False, 0.0
    for tp in tps:
        checks = _fits_at(req, gpu, tp)
        fitting = [c.footprint for c in checks if c.fits]
        if not fitting:
            continue
        fitted_any = True
        choice = best_capacity_config(
            req.model, gpu, tp, req.sla, req.workload, req.space, fitting, engine=req.engine
        )
        if choice is None:
            continue
        per_gpu = choice.capacity_rps / tp
        sixteen = next((c for c in checks if c.footprint["quantization"] in SIXTEEN_BIT), None)
        full = check_fit(
            req.model,
            gpu,
            req.workload,
            footprint_of(choice.config),
            tp,
            min_batched_tokens=choice.config.max_num_batched_tokens,
        )
        note = fit_note(req.model, gpu, choice.config, sixteen, full.plan, choice.capacity_rps)
        options.append(
            size_option(req, gpu, choice, price, note, max_context_tokens(req.model, full.plan))
        )
        if per_gpu < prev_per_gpu:
            break  # TP comms only grow with TP; a larger shard will not be cheaper per GPU
        prev_per_gpu = per_gpu
    if not fitted_any:
        base.reason = _no_fit_reason(req, gpu, tps)
        return base
    if not options:
        return base.model_copy(
            update={
                "status": "misses-sla",
                "reason": (
                    f"no variant that fits meets the SLA (TTFT {req.sla.ttft_ms} ms, TPOT "
                    f"{req.sla.tpot_ms} ms at P{req.sla.percentile}) at any load"
                ),
            }
        )
    best = min(options, key=_option_cost)
    disaggregated = disagg_option(req, gpu, best, price)
    return base.model_copy(
        update={"status": "ok", "best": best, "options": options, "disaggregated": disaggregated}
    )


def rank_kinds(kinds: list[KindPlan]) -> list[KindPlan]:
    """Meeting the SLA first, cheapest per hour (then fewest GPUs); misses, then no-fits, last."""
    order = {"ok": 0, "misses-sla": 1, "no-fit": 2}

    def key(k: KindPlan) -> tuple[int, float, float, str]:
        cost = _option_cost(k.best) if k.best else (math.inf, math.inf)
        return (order[k.status], *cost, k.gpu)

    return sorted(kinds, key=key)


def plan(req: PlanRequest, prices: PriceTable) -> PlanResult:
    """Plan every GPU kind of `req` and rank them; the cheapest priced kind meeting the SLA wins."""
    start = time.perf_counter()
    kinds = [plan_kind(req, g, prices.get(g.name)) for g in req.gpus]
    ranked = rank_kinds(kinds)
    cheapest = next((k.gpu for k in ranked if k.best and k.best.usd_per_hour is not None), None)
    missing = [g.name for g in req.gpus if prices.get(g.name) is None]
    return PlanResult(
        request=req,
        kinds=ranked,
        cheapest=cheapest,
        missing_prices=missing,
        elapsed_s=time.perf_counter() - start,
    )
