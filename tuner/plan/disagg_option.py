"""The plan's second shape: the same weights served by disaggregated prefill/decode pools.

For each GPU kind that meets the SLA aggregated, the deployment search
(`tuner.search.deployments`) finds the best xPyD unit within two scale-up domains (one rack
for NVL72), then as many units as the target needs are priced like replicas: the cheaper
shape at the SLA is named, and why (capacity per GPU at the SLA).
"""

from __future__ import annotations

from tuner import catalog
from tuner.plan import sizing
from tuner.plan.models import DisaggOption, Option, PlanRequest
from tuner.prices import GPUPrice
from tuner.search.deployments import binding_text, compare_deployments
from tuner.specs import Context, GPUProfile

__all__ = ["disagg_option"]

# One unit of the disaggregated shape spans at most this many scale-up domains.
UNIT_DOMAINS = 2


def disagg_option(
    req: PlanRequest, gpu: GPUProfile, best: Option, price: GPUPrice | None
) -> DisaggOption | str:
    """The best disaggregated deployment of `best`'s variant, sized and priced; else why none."""
    domain = gpu.nvlink_domain if gpu.nvlink_gbps > 0 else 1
    ctx = Context(model=req.model, gpu=gpu, sla=req.sla, workload=req.workload,
                  num_gpus=domain if domain >= 72 else UNIT_DOMAINS * domain)  # fmt: skip
    per_gpu = best.capacity_rps_per_replica / best.tp
    choice = compare_deployments(best.config, ctx, catalog.node_for_gpu(gpu),
                                 aggregated_rps_per_gpu=per_gpu)  # fmt: skip
    top = choice.best
    if top is None or top.metrics is None or top.rps_per_gpu <= 0:
        return choice.skipped or "no disaggregated deployment meets the SLA"
    unit_rps = top.rps_per_gpu * top.deployment.gpus
    units = sizing.replicas_needed(best.target_rps, unit_rps, req.headroom)
    gpus = units * top.deployment.gpus
    hourly = sizing.usd_per_hour(gpus, price.usd_per_gpu_hour) if price is not None else None
    if hourly is not None and best.usd_per_hour is not None:
        cheaper = hourly < best.usd_per_hour
    else:
        cheaper = gpus < best.gpus
    pct = req.sla.percentile
    return DisaggOption(
        shape=top.deployment.shape(),
        deployment=top.deployment,
        capacity_rps_per_unit=unit_rps,
        units=units,
        gpus=gpus,
        usd_per_hour=hourly,
        ttft_ms=top.metrics.ttft_ms.at(pct),
        tpot_ms=top.metrics.tpot_ms.at(pct),
        binding=binding_text(top, req.sla),
        cheaper=cheaper,
    )
