"""Memory fit: which TP sizes and weight/KV precisions let a model fit a GPU, and why not.

A plan only searches variants that fit; for cards where 16-bit weights do not, it says which
quantization / KV dtype makes them fit and how long a context one sequence can then hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.knobs.registry import footprint_knobs, footprint_words
from tuner.perf.memory import MemoryPlan, plan_memory, replica_gpus
from tuner.specs import EngineConfig, GPUProfile, ModelSpec, Quantization, Workload
from tuner.validity import heads_split_reason

__all__ = [
    "FitCheck",
    "check_fit",
    "fit_note",
    "max_context_tokens",
    "smallest_footprint",
    "tp_sizes",
]

SIXTEEN_BIT = (Quantization.bf16, Quantization.fp16)


def tp_sizes(model: ModelSpec, max_gpus_per_replica: int) -> list[int]:
    """Powers of two up to `max_gpus_per_replica` that shard the model's attention heads."""
    sizes, tp = [], 1
    while tp <= max_gpus_per_replica:
        if heads_split_reason(model, tp) is None:
            sizes.append(tp)
        tp *= 2
    return sizes


@dataclass(frozen=True)
class FitCheck:
    """Memory plan of one footprint (weight and KV precision, by knob name) at one TP size."""

    footprint: dict[str, Any]
    tp: int
    plan: MemoryPlan

    @property
    def fits(self) -> bool:
        """Whether the weights and at least one full-length sequence fit."""
        return self.plan.feasible


def check_fit(
    model: ModelSpec,
    gpu: GPUProfile,
    workload: Workload,
    footprint: dict[str, Any],
    tp: int,
    *,
    min_batched_tokens: int,
) -> FitCheck:
    """Plan memory with the smallest token budget the search may use (the most room for KV)."""
    config = EngineConfig(
        **footprint,
        tensor_parallel_size=tp,
        max_num_batched_tokens=min_batched_tokens,
        max_num_seqs=1,
    )
    return FitCheck(dict(footprint), tp, plan_memory(model, gpu, config, workload))


def smallest_footprint(
    model: ModelSpec,
    gpu: GPUProfile,
    workload: Workload,
    allowed: dict[str, list[Any]],
    tp: int,
    *,
    min_batched_tokens: int,
) -> FitCheck:
    """The allowed variant with the fewest weight bits and smallest KV: the best chance to fit."""
    smallest = {
        k.name: next(v for v in k.footprint if v in allowed[k.name]) for k in footprint_knobs()
    }
    return check_fit(model, gpu, workload, smallest, tp, min_batched_tokens=min_batched_tokens)


def max_context_tokens(model: ModelSpec, plan: MemoryPlan) -> int:
    """Longest single sequence the KV pool holds, capped at the model's max context."""
    return min(model.max_context, plan.kv_capacity_tokens)


def fit_note(
    model: ModelSpec,
    gpu: GPUProfile,
    config: EngineConfig,
    sixteen_bit: FitCheck | None,
    chosen: MemoryPlan,
    capacity_rps: float,
) -> str:
    """Why a card needs quantization (if 16-bit does not fit it) and what fits at what capacity."""
    where = f"{replica_gpus(config)}x {gpu.name}"
    context = max_context_tokens(model, chosen)
    fits = (
        f"fits {where} with {footprint_words(config, ' and ')} at up to "
        f"{context}-token context, {capacity_rps:.2f} req/s"
    )
    if sixteen_bit is None or sixteen_bit.fits:
        return fits
    return f"16-bit does not fit {where}: {sixteen_bit.plan.reason}; {fits}"
