"""Aggregated or disaggregated: the deployment search around a tune's recommended variant.

Given the variant (its weights, KV dtype, engine and speculation), which way of spending
`--num-gpus` serves the most requests per GPU at the SLA: replicas of the aggregated engine, or
x prefill workers handing their KV to y decode workers, each pool with its own layout?

The search sizes pools the way rate matching does (AIConfigurator's and Dynamo's planners size
xPyD the same way): for every worker layout that fits (TP, attention DP, expert parallelism
inside one scale-up domain), one prefill worker's saturated prompt rate (a burst of prompts
through the simulator) and one decode worker's rate at the TPOT bound (the largest batch whose
decode step meets it, at the mean context); x:y is chosen so neither pool idles, within the
GPUs. The best estimates are then searched in full (`perf.disagg.disagg_capacity`: both pools,
the hand-off, the SLA percentiles) next to the aggregated variant's own capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import product

import numpy as np

from tuner.deployment import Deployment, NodeProfile, Pool
from tuner.errors import InputError
from tuner.perf.capacity import sim_capacity
from tuner.perf.disagg import disagg_capacity
from tuner.perf.efficiency import resolve_efficiency
from tuner.perf.predict import EngineSetup, engine_setup
from tuner.perf.scheduler import RequestSet, simulate
from tuner.specs import SLA, Context, EngineConfig, Metrics

__all__ = [
    "DeploymentChoice",
    "DeploymentOption",
    "binding_text",
    "compare_deployments",
    "worker_layouts",
]

# Candidates searched in full after the rate-matching estimate ranks them.
FULL_SEARCHES = 4
# Prompts in the burst that measures one prefill worker's saturated rate (per attention-DP rank).
BURST_PER_RANK = 8
# A bound this close to its limit at the capacity load is the one that binds.
SLA_NEAR = 0.9


@dataclass(frozen=True)
class DeploymentOption:
    """One disaggregated deployment and its capacity at the SLA."""

    deployment: Deployment
    rps_per_gpu: float
    estimate_rps_per_gpu: float  # the rate-matching estimate that ranked it
    metrics: Metrics | None = None  # at the capacity load
    # Each pool's estimated rate (prompts/s the prefill workers saturate at, requests/s the
    # decode workers serve at the TPOT bound): utilisation = capacity load / rate.
    prefill_pool_rps: float = 0.0
    decode_pool_rps: float = 0.0

    @property
    def load_rps(self) -> float:
        """Requests/s of the whole deployment at its capacity."""
        return self.rps_per_gpu * self.deployment.gpus

    def utilisation(self) -> tuple[float, float]:
        """(prefill pool, decode pool) busy fractions at the capacity load, from their rates."""
        pre = self.load_rps / self.prefill_pool_rps if self.prefill_pool_rps else 0.0
        dec = self.load_rps / self.decode_pool_rps if self.decode_pool_rps else 0.0
        return pre, dec


@dataclass
class DeploymentChoice:
    """The aggregated variant's capacity next to the best disaggregated deployments."""

    aggregated_rps_per_gpu: float
    options: list[DeploymentOption] = field(default_factory=list)  # best first
    skipped: str | None = None  # why no disaggregated deployment was considered

    @property
    def best(self) -> DeploymentOption | None:
        """The best disaggregated option, if any ran."""
        return self.options[0] if self.options else None

    @property
    def disaggregated_wins(self) -> bool:
        """Whether the best disaggregated deployment serves more per GPU than aggregation."""
        best = self.best
        return best is not None and best.rps_per_gpu > self.aggregated_rps_per_gpu


def worker_layouts(base: EngineConfig, ctx: Context) -> list[EngineConfig]:
    """Every worker layout of `base` inside one scale-up domain that its engine can run and
    whose weights fit (TP x attention DP, with and without expert parallelism for MoE)."""
    return [config for config, _ in _layout_setups(base, ctx)]


def _layout_setups(base: EngineConfig, ctx: Context) -> list[tuple[EngineConfig, EngineSetup]]:
    """`worker_layouts` with each layout's simulation setup, built once."""
    limit = min(ctx.num_gpus, ctx.gpu.nvlink_domain if ctx.gpu.nvlink_gbps > 0 else 1)
    sizes = [2**i for i in range(int(math.log2(max(1, limit))) + 1)]
    eff = resolve_efficiency(None, ctx.gpu)
    out = []
    for tp, dp in product(sizes, sizes):
        if tp * dp > limit:
            continue
        for ep in (False, True) if ctx.model.is_moe and tp * dp > 1 else (False,):
            fields = {"tensor_parallel_size": tp, "data_parallel_size": dp, "expert_parallel": ep}
            try:
                config = EngineConfig(**{**base.model_dump(), **fields})
            except ValueError:
                continue
            setup = engine_setup(config, ctx, ctx.workload, eff)
            if isinstance(setup, EngineSetup):
                out.append((config, setup))
    return out


def _prefill_rate(setup: EngineSetup, ctx: Context) -> float:
    """One prefill worker's saturated prompts/s: a burst of prompts, one output token each."""
    n = BURST_PER_RANK * setup.limits.dp_ranks
    prompts = np.full(n, ctx.workload.input_tokens)
    res = simulate(RequestSet(prompts, np.ones(n, dtype=int), np.zeros(n)), setup.limits,
                   setup.target, setup.spec)  # fmt: skip
    span = float(np.nanmax(res.finish_s))
    return n / span if span > 0 and np.isfinite(span) else 0.0


def _decode_rate(setup: EngineSetup, ctx: Context) -> float:
    """One decode worker's requests/s at the TPOT bound: the largest batch whose step meets it."""
    wl, bound_s = ctx.workload, ctx.sla.tpot_ms / 1e3 if ctx.sla.tpot_ms else math.inf
    context = wl.input_tokens + wl.output_tokens / 2.0
    fits = setup.plan.kv_capacity_tokens // max(1, wl.input_tokens + wl.output_tokens)
    top = max(1, min(setup.limits.max_num_seqs, fits))
    tps = setup.spec.tokens_per_step if setup.spec else 1.0
    best = 0.0
    for batch in sorted({min(top, 2**i) for i in range(int(math.log2(top)) + 2)}):
        step = setup.target.decode_step_s(batch, context)
        if step / tps > bound_s:
            break
        best = max(best, batch * tps / (step * max(1, wl.output_tokens)))
    return best


def _estimates(
    layouts: list[tuple[EngineConfig, EngineSetup]], ctx: Context
) -> list[DeploymentOption]:
    """Rate-matched deployments of every prefill/decode layout pair, best estimate first (the
    options' capacities not yet searched)."""
    rates = []
    for config, setup in layouts:
        gpus = config.tensor_parallel_size * config.data_parallel_size
        rates.append((config, gpus, _prefill_rate(setup, ctx), _decode_rate(setup, ctx)))
    found: dict[str, DeploymentOption] = {}
    for (pc, pg, sp, _), (dc, dg, _, sd) in product(rates, rates):
        if sp <= 0 or sd <= 0:
            continue
        for x in range(1, ctx.num_gpus // pg + 1):
            want = x * sp / sd  # decode workers that keep up with x prefill workers
            for y in {max(1, math.floor(want)), max(1, math.ceil(want))}:
                if x * pg + y * dg > ctx.num_gpus:
                    continue
                per_gpu = min(x * sp, y * sd) / (x * pg + y * dg)
                d = Deployment(
                    prefill=Pool(workers=x, config=pc), decode=Pool(workers=y, config=dc)
                )
                key = d.shape()
                if key not in found or found[key].estimate_rps_per_gpu < per_gpu:
                    found[key] = DeploymentOption(d, 0.0, per_gpu, None, x * sp, y * sd)
    return sorted(found.values(), key=lambda e: -e.estimate_rps_per_gpu)


def compare_deployments(
    config: EngineConfig,
    ctx: Context,
    node: NodeProfile | None,
    *,
    aggregated_rps_per_gpu: float | None = None,
) -> DeploymentChoice:
    """The aggregated `config` (its capacity per GPU, searched here unless given) against the
    best disaggregated deployments of its weights, in requests/s per GPU at the SLA."""
    if aggregated_rps_per_gpu is None:
        agg, _ = sim_capacity(config, ctx, mode="rate", operating_point=False)
        aggregated_rps_per_gpu = agg.rps_per_gpu
    choice = DeploymentChoice(aggregated_rps_per_gpu=aggregated_rps_per_gpu)
    layouts = _layout_setups(config, ctx)
    if not layouts or 2 * min(c.tensor_parallel_size * c.data_parallel_size for c, _ in layouts) > (
        ctx.num_gpus
    ):
        choice.skipped = (
            f"--num-gpus {ctx.num_gpus} holds no separate prefill and decode worker of this model"
        )
        return choice
    for est in _estimates(layouts, ctx)[:FULL_SEARCHES]:
        try:
            cap, metrics = disagg_capacity(
                est.deployment, ctx, node=node, mode="rate", operating_point=False,
                saturated_rps=est.prefill_pool_rps,
            )  # fmt: skip
        except InputError as exc:  # e.g. crosses nodes with no node profile for the GPU
            choice.skipped = str(exc)
            continue
        found = metrics if cap.at_sla else None
        choice.options.append(replace(est, rps_per_gpu=cap.rps_per_gpu, metrics=found))
    choice.options.sort(key=lambda o: -o.rps_per_gpu)
    return choice


def binding_text(option: DeploymentOption, sla: SLA) -> str:
    """Which pool (or the link) stops a disaggregated deployment's load from rising."""
    m, d = option.metrics, option.deployment
    if m is None:
        return "no load meets the SLA"
    pct = sla.percentile
    ttft, tpot = m.ttft_ms.at(pct), m.tpot_ms.at(pct)
    handoff = float(str(m.extra.get("handoff_ms_p50", 0.0)))
    prefill = float(str(m.extra.get("prefill_ms_p50", 0.0)))
    ttft_use = ttft / sla.ttft_ms if sla.ttft_ms else 0.0
    tpot_use = tpot / sla.tpot_ms if sla.tpot_ms else 0.0
    if max(ttft_use, tpot_use) < SLA_NEAR:
        return (
            f"saturation of the prefill pool ({d.prefill.workers} workers): every prompt passes "
            f"it, at most its burst rate; TTFT P{pct} {ttft:.0f} ms, TPOT P{pct} {tpot:.1f} ms"
        )
    if ttft_use >= tpot_use:
        return (
            f"TTFT P{pct} {ttft:.0f} ms of {sla.ttft_ms:g}: the prefill pool's queue and prefill "
            f"({prefill:.0f} ms P50) and the hand-off over {m.extra.get('handoff_link', '?')} "
            f"({handoff:.2f} ms P50)"
        )
    return (
        f"TPOT P{pct} {tpot:.1f} ms of {sla.tpot_ms:g}: the decode pool's step at its batch "
        f"({d.decode.workers} workers, max {d.decode.config.max_num_seqs} sequences per DP rank)"
    )
