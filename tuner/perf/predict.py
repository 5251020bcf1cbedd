"""One prediction end to end: memory plan -> step costs -> scheduler simulation -> Metrics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuner.bench.trace_plan import workload_plan
from tuner.perf.costs import StepCostModel, step_cost_model
from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.engines import EngineModel, engine_model
from tuner.perf.memory import GIB, MemoryPlan, plan_memory, replica_gpus, replica_shape
from tuner.perf.precision import DRAFT_QUANTIZATION
from tuner.perf.prefix_sim import prefix_metrics
from tuner.perf.scheduler import RequestSet, SchedulerLimits, requests_from_plan, simulate
from tuner.perf.speculative import NGRAM, Speculation, acceptance_for, step_coeffs
from tuner.perf.summary import summarize
from tuner.specs import MTP, Context, EngineConfig, Metrics, Workload, draft_to_load
from tuner.validity import invalid_reason

__all__ = [
    "NGRAM",
    "EngineSetup",
    "closed_loop_cycle_s",
    "engine_setup",
    "predict_metrics",
    "speculation_for",
    "sim_requests",
]

BACKEND = "sim"


def speculation_for(
    config: EngineConfig, ctx: Context, eff: Efficiency | None = None
) -> Speculation | None:
    """The speculative setup of `config`, or None; the draft ModelSpec comes from `ctx.draft`."""
    if not config.num_speculative_tokens or config.draft_model is None:
        return None
    eff = resolve_efficiency(eff, ctx.gpu)
    k = config.num_speculative_tokens
    # The stated rate, else the --gpu profile's measured curve, else the default (one place).
    choice = acceptance_for(config.draft_model, ctx.workload, ctx.gpu.calibration, ctx.sla.kind)
    curve = tuple(choice.curve.per_position) if choice.curve else None
    if config.draft_model == NGRAM:
        return Speculation(k, choice.per_token, None, eff.ngram_proposal_s, per_position=curve)
    if config.draft_model == MTP:
        module = ctx.model.mtp_module()
        if module is None:
            raise ValueError(f"{ctx.model.name} has no MTP layers to speculate with")
        # The module runs in the checkpoint's own precision, once per draft position.
        draft = step_cost_model(module, ctx.gpu, config, eff)
        return Speculation(k, choice.per_token, draft, per_position=curve)
    if ctx.draft is None:
        raise ValueError(f"draft model {config.draft_model!r} is not resolved in the context")
    draft = step_cost_model(ctx.draft, ctx.gpu, config, eff, quantization=DRAFT_QUANTIZATION)
    return Speculation(k, choice.per_token, draft, per_position=curve)


def closed_loop_cycle_s(
    wl: Workload,
    target: StepCostModel,
    spec: Speculation | None,
    max_num_seqs: int,
    overhead_s: float,
) -> float:
    """Estimated time of one closed-loop request at full load: the ramp users start over.

    Ingress, one prefill step of the mean prompt, and the mean output's decode steps at a batch
    of min(users, max_num_seqs) sequences holding the mean context.
    """
    batch = max(1, min(wl.users, max_num_seqs))
    tps = spec.tokens_per_step if spec else 1.0
    const, _ = step_coeffs(target, spec, 0, wl.input_tokens, 1)
    prefill_s = const + target.prefill_attn_s(wl.input_tokens, 0)
    d_const, per_ctx = step_coeffs(target, spec, batch, 0, 0)
    decode_s = d_const + per_ctx * batch * (wl.input_tokens + wl.output_tokens / 2.0)
    return overhead_s + prefill_s + max(0.0, wl.output_tokens - 1) / tps * decode_s


def sim_requests(
    wl: Workload,
    target: StepCostModel,
    spec: Speculation | None,
    max_num_seqs: int,
    overhead_s: float,
) -> RequestSet:
    """The workload's planned trace (warm-up included), closed-loop users spread over a cycle."""
    plan = workload_plan(wl)
    if wl.start_ramp_s is not None:
        ramp = wl.start_ramp_s
    else:
        ramp = closed_loop_cycle_s(wl, target, spec, max_num_seqs, overhead_s)
    return requests_from_plan(plan, ramp)


@dataclass(frozen=True)
class EngineSetup:
    """One engine variant ready to simulate: memory plan, step costs, speculation, limits."""

    plan: MemoryPlan
    target: StepCostModel
    spec: Speculation | None
    limits: SchedulerLimits
    engine: EngineModel


def engine_setup(
    config: EngineConfig,
    ctx: Context,
    wl: Workload,
    eff: Efficiency,
    *,
    batch_wait: tuple[int, int] = (0, 0),
    engine: EngineModel | None = None,
) -> EngineSetup | Metrics:
    """What simulating `config` needs, or infeasible Metrics saying why it cannot run."""
    reason = invalid_reason(config, ctx)  # the rules predict and tune refuse with
    if reason:
        return Metrics.infeasible(reason, BACKEND)
    draft = ctx.draft if draft_to_load(config) else None
    speculates_mtp = config.draft_model == MTP and config.num_speculative_tokens > 0
    mtp = ctx.model.mtp_module() if speculates_mtp else None
    plan = plan_memory(ctx.model, ctx.gpu, config, wl, draft=draft, eff=eff, mtp=mtp)
    if not plan.feasible:
        return Metrics.infeasible(
            plan.reason or "does not fit",
            BACKEND,
            weights_gib=plan.weights_bytes / GIB,
            kv_capacity_tokens=plan.kv_capacity_tokens,
        )
    context = wl.input_tokens + wl.output_tokens / 2.0
    target = step_cost_model(ctx.model, ctx.gpu, config, eff, context=context)
    spec = speculation_for(config, ctx, eff)
    # DP ranks schedule independently; the replica holds DP times one rank's limits.
    tp, dp = replica_shape(config)
    queries = spec.queries_per_seq if spec else 1
    engine = engine or engine_model(
        config.engine, tp, ctx.gpu.memory_gib, graph_batch_tokens=config.max_num_seqs * queries
    )
    limits = SchedulerLimits(
        max_num_seqs=config.max_num_seqs * dp,
        max_num_batched_tokens=config.max_num_batched_tokens * dp,
        kv_capacity_blocks=plan.kv_capacity_blocks,
        block_size=config.block_size,
        enable_chunked_prefill=config.enable_chunked_prefill,
        prefix_cache_hit=wl.prefix_cache_hit if config.enable_prefix_caching else 0.0,
        prefix_caching=bool(config.enable_prefix_caching),
        request_overhead_s=eff.request_overhead_s,
        mix_prefill_decode=engine.mix_prefill_decode,
        batch_wait_iters=batch_wait[0],
        batch_wait_tokens=batch_wait[1],
        engine=engine,
        dp_ranks=dp,
    )
    return EngineSetup(plan, target, spec, limits, engine)


def predict_metrics(
    config: EngineConfig,
    ctx: Context,
    eff: Efficiency | None = None,
    workload: Workload | None = None,
    *,
    batch_wait: tuple[int, int] = (0, 0),
    engine: EngineModel | None = None,
) -> Metrics:
    """Predict what `config` does under `workload` (default `ctx.workload`); infeasible with why.

    The variant's `engine` knob picks the scheduler and overheads replayed (tuner.perf.engines);
    `batch_wait=(iters, tokens)` turns on TensorRT-LLM's batch waiting (off by default there);
    `engine` replays another behaviour record than the knob's (a benchmark's recorded setup).
    `eff=None` uses the constants of `ctx.gpu` (its calibration, else the defaults).
    """
    eff = resolve_efficiency(eff, ctx.gpu)
    wl = workload or ctx.workload
    setup = engine_setup(config, ctx, wl, eff, batch_wait=batch_wait, engine=engine)
    if isinstance(setup, Metrics):
        return setup
    plan, target, spec = setup.plan, setup.target, setup.spec
    limits, engine = setup.limits, setup.engine
    requests = sim_requests(wl, target, spec, limits.max_num_seqs, eff.request_overhead_s)
    result = simulate(requests, limits, target, spec)
    unfinished = int((~np.isfinite(result.finish_s)).sum())
    if unfinished:
        return Metrics.infeasible(
            f"{unfinished} of {requests.count} requests could never be scheduled "
            f"(KV capacity {plan.kv_capacity_tokens} tokens)",
            BACKEND,
            weights_gib=plan.weights_gib,
            kv_capacity_tokens=plan.kv_capacity_tokens,
        )
    metrics = summarize(result, plan, ctx.sla, replica_gpus(config), BACKEND)
    metrics.extra.update(prefix_metrics(result))
    metrics.extra["kernel_path"] = target.kernel_path
    metrics.extra["engine"] = engine.name
    metrics.extra["engine_version"] = engine.version
    metrics.extra["tokens_per_step"] = spec.tokens_per_step if spec else 1.0
    if spec and config.draft_model:
        choice = acceptance_for(config.draft_model, wl, ctx.gpu.calibration, ctx.sla.kind)
        metrics.extra["acceptance"] = choice.text
        metrics.extra["acceptance_measured"] = choice.measured
    metrics.extra["batch1_decode_ms"] = 1e3 * target.decode_step_s(
        1, wl.input_tokens + wl.output_tokens / 2
    )
    return metrics
