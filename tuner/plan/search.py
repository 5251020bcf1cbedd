"""The highest-capacity variant of one GPU kind x tensor-parallel size under an SLA (simulator).

This is the one place a plan asks "what is the best this hardware can do": everything else in
`tuner.plan` is arithmetic on its answer, so a capacity-optimising tune can replace the bounded
search below without touching the rest.

Bounded search (a few dozen simulator runs, each a capacity bisection of ~15 predictions):
1. every footprint (quantization x KV dtype) of the space that fits, at the starting batch limits,
   and for a MoE model every valid layout of the replica's GPUs that the space offers (TP only,
   TP with expert parallelism, DP attention with expert parallelism);
2. for the best two, `max_num_seqs` over powers of two in the space's range, then
   `max_num_batched_tokens` likewise, keeping whichever raises capacity.
Speculative decoding is left out: at the loads a plan sizes for, batches are large and drafting
costs more compute than it saves (and the acceptance rate is workload-specific).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.perf.capacity import max_rate_meeting_sla
from tuner.perf.efficiency import Efficiency
from tuner.specs import (
    SLA,
    Context,
    Engine,
    EngineConfig,
    GPUProfile,
    IntRange,
    ModelSpec,
    SearchSpace,
    Workload,
)
from tuner.validity import invalid_reason

__all__ = [
    "REFINED_KNOBS",
    "CapacityChoice",
    "best_capacity_config",
    "knob_grid",
    "replica_layouts",
]

# vLLM's defaults, the starting point of the coordinate search (clamped into the space).
_START_SEQS = 256
_START_TOKENS = 8192
# Footprints (weight x KV precision) refined in stage 2.
_REFINE_TOP = 2
# The batch limits stage 2 refines, in order (a plan's CSV shows them beside the footprint).
REFINED_KNOBS = ("max_num_seqs", "max_num_batched_tokens")


@dataclass(frozen=True)
class CapacityChoice:
    """The best variant found and its SLA capacity for one replica (all of its TP GPUs)."""

    config: EngineConfig
    capacity_rps: float
    evaluations: int


def knob_grid(knob: list[int] | IntRange) -> list[int]:
    """Candidate values of an integer knob: its list, or the powers of two inside its range."""
    if isinstance(knob, list):
        return sorted(set(knob))
    values, v = [], 1
    while v <= knob.high:
        if v >= knob.low and (v - knob.low) % knob.step == 0:
            values.append(v)
        v *= 2
    return values or [knob.low, knob.high]


def replica_layouts(model: ModelSpec, gpus: int, space: SearchSpace) -> list[dict[str, Any]]:
    """The ways to lay one replica over `gpus` GPUs: TP only, and for MoE models the space's
    expert-parallel and DP-attention splits (DP x TP = gpus)."""
    layouts: list[dict[str, Any]] = [{"tensor_parallel_size": gpus}]
    if not model.is_moe:
        return layouts
    if True in space.expert_parallel:
        layouts.append({"tensor_parallel_size": gpus, "expert_parallel": True})
    for dp in space.data_parallel_size:
        if 1 < dp <= gpus and gpus % dp == 0:
            ep = True in space.expert_parallel
            layouts.append(
                {
                    "tensor_parallel_size": gpus // dp,
                    "data_parallel_size": dp,
                    "expert_parallel": ep,
                }
            )
    return layouts


def _nearest(grid: list[int], target: int) -> int:
    return min(grid, key=lambda v: (abs(v - target), v))


def best_capacity_config(
    model: ModelSpec,
    gpu: GPUProfile,
    tp: int,
    sla: SLA,
    workload: Workload,
    space: SearchSpace,
    footprints: list[dict[str, Any]],
    *,
    engine: Engine = Engine.vllm,
    eff: Efficiency | None = None,
) -> CapacityChoice | None:
    """Search `footprints` (weight/KV precisions that fit) and `space`'s batch limits on
    `engine`; None if no variant meets the SLA."""
    ctx = Context(model=model, gpu=gpu, sla=sla, workload=workload, num_gpus=tp)
    seqs_grid = knob_grid(space.max_num_seqs)
    tokens_grid = knob_grid(space.max_num_batched_tokens)
    seen: dict[tuple[object, ...], float] = {}

    def capacity(config: EngineConfig) -> float:
        key = config.key()
        if key not in seen:
            seen[key] = max_rate_meeting_sla(config, ctx, eff=eff) * tp
        return seen[key]

    start = {
        "max_num_seqs": _nearest(seqs_grid, _START_SEQS),
        "max_num_batched_tokens": _nearest(tokens_grid, _START_TOKENS),
        "enable_prefix_caching": space.enable_prefix_caching[0],
        "engine": engine,
    }
    firsts = [
        config
        for footprint in footprints
        for layout in replica_layouts(model, tp, space)
        if not invalid_reason(config := EngineConfig(**footprint, **layout, **start), ctx)
    ]
    ranked = sorted(firsts, key=capacity, reverse=True)[:_REFINE_TOP]
    best = ranked[0] if ranked else None
    for config in ranked:
        for field, grid in zip(REFINED_KNOBS, (seqs_grid, tokens_grid), strict=True):
            options = [config.model_copy(update={field: v}) for v in grid]
            config = max(options, key=lambda c: (capacity(c), -c.max_num_seqs))
        if best is None or capacity(config) > capacity(best):
            best = config
    if best is None or capacity(best) <= 0:
        return None
    return CapacityChoice(best, capacity(best), len(seen))
