"""One prediction end to end: memory plan -> step costs -> scheduler simulation -> Metrics."""

from __future__ import annotations

import numpy as np

from tuner.perf.costs import step_cost_model
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from tuner.perf.memory import GIB, plan_memory
from tuner.perf.precision import DRAFT_QUANTIZATION
from tuner.perf.scheduler import SchedulerLimits, make_requests, simulate
from tuner.perf.speculative import Speculation
from tuner.perf.summary import summarize
from tuner.specs import Context, EngineConfig, Metrics, Workload
from tuner.validity import invalid_reason

__all__ = ["NGRAM", "predict_metrics", "speculation_for"]

# Draft-model name of the prompt-lookup proposer (no model weights, vLLM `method: ngram`).
NGRAM = "ngram"
BACKEND = "sim"


def speculation_for(
    config: EngineConfig, ctx: Context, eff: Efficiency = DEFAULT_EFFICIENCY
) -> Speculation | None:
    """The speculative setup of `config`, or None; the draft ModelSpec comes from `ctx.draft`."""
    if not config.num_speculative_tokens:
        return None
    if config.draft_model == NGRAM:
        ngram_acceptance = ctx.workload.ngram_acceptance_rate
        return Speculation(
            config.num_speculative_tokens, ngram_acceptance, None, eff.ngram_proposal_s
        )
    acceptance = ctx.workload.acceptance_rate
    if ctx.draft is None:
        raise ValueError(f"draft model {config.draft_model!r} is not resolved in the context")
    draft = step_cost_model(ctx.draft, ctx.gpu, config, eff, quantization=DRAFT_QUANTIZATION)
    return Speculation(config.num_speculative_tokens, acceptance, draft)


def predict_metrics(
    config: EngineConfig,
    ctx: Context,
    eff: Efficiency = DEFAULT_EFFICIENCY,
    workload: Workload | None = None,
) -> Metrics:
    """Predict what `config` does under `workload` (default `ctx.workload`); infeasible with why."""
    wl = workload or ctx.workload
    reason = invalid_reason(config, ctx)  # the rules predict and tune refuse with
    if reason:
        return Metrics.infeasible(reason, BACKEND)
    draft = ctx.draft if config.num_speculative_tokens and config.draft_model != NGRAM else None
    plan = plan_memory(ctx.model, ctx.gpu, config, wl, draft=draft, eff=eff)
    if not plan.feasible:
        return Metrics.infeasible(
            plan.reason or "does not fit",
            BACKEND,
            weights_gib=plan.weights_bytes / GIB,
            kv_capacity_tokens=plan.kv_capacity_tokens,
        )
    target = step_cost_model(ctx.model, ctx.gpu, config, eff)
    spec = speculation_for(config, ctx, eff)
    requests = make_requests(
        wl.num_requests,
        wl.input_tokens,
        wl.output_tokens,
        length_spread=wl.length_spread,
        rate_rps=wl.rate_rps,
        users=wl.users,
        seed=wl.seed,
    )
    limits = SchedulerLimits(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        kv_capacity_blocks=plan.kv_capacity_blocks,
        block_size=config.block_size,
        enable_chunked_prefill=config.enable_chunked_prefill,
        prefix_cache_hit=wl.prefix_cache_hit if config.enable_prefix_caching else 0.0,
        request_overhead_s=eff.request_overhead_s,
    )
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
    metrics = summarize(result, plan, ctx.sla, config.tensor_parallel_size, BACKEND)
    metrics.extra["kernel_path"] = target.kernel_path
    metrics.extra["tokens_per_step"] = spec.tokens_per_step if spec else 1.0
    metrics.extra["batch1_decode_ms"] = 1e3 * target.decode_step_s(
        1, wl.input_tokens + wl.output_tokens / 2
    )
    return metrics
