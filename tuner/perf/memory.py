"""Memory planner: weight and KV bytes per GPU, KV capacity, and why a variant does not fit.

Mirrors vLLM's budget: `gpu_memory_utilization x device memory` must hold the weights, the
activation peak of a `max_num_batched_tokens` forward pass, the runtime's own allocations, and
whatever is left becomes the paged KV pool (in blocks of `block_size` tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.precision import (
    ACTIVATION_BYTES,
    DRAFT_QUANTIZATION,
    kv_bytes_per_vector,
    precision_for,
)
from tuner.specs import EngineConfig, GPUProfile, KVDtype, ModelSpec, Quantization, Workload

__all__ = [
    "GIB",
    "MemoryPlan",
    "activation_workspace_bytes",
    "config_kv_bytes_per_token",
    "kv_bytes_per_token",
    "kv_heads_per_gpu",
    "linear_params_per_gpu",
    "plan_memory",
    "weight_bytes_per_gpu",
]

GIB = 1024.0**3
# Logits are materialised in fp32 for sampling.
LOGIT_BYTES = 4.0


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each TP shard stores: sharded, or replicated when there are fewer than `tp`."""
    return max(1, math.ceil(model.num_kv_heads / tp))


def linear_params_per_gpu(model: ModelSpec, tp: int) -> float:
    """Parameters of all transformer-block GEMMs one TP shard holds (replicated KV heads incl.)."""
    d, hd = model.hidden_size, model.head_dim_
    q_out = model.num_attention_heads * hd
    kv_out = kv_heads_per_gpu(model, tp) * hd
    attn = 2 * d * q_out / tp + 2 * d * kv_out
    mlp = model.mlp_params_per_layer / tp
    return model.num_layers * (attn + mlp)


def _sixteen_bit_params_per_gpu(model: ModelSpec, tp: int) -> float:
    """Embedding and LM head (vocab-parallel) plus norms (replicated), kept in 16 bits."""
    return model.embedding_params / tp + model.norm_params


def weight_bytes_per_gpu(model: ModelSpec, quant: Quantization, gpu: GPUProfile, tp: int) -> float:
    """Stored weight bytes on one TP shard: quantized GEMMs (with scales) + 16-bit rest."""
    prec = precision_for(quant, gpu, model.hidden_size)
    return (
        linear_params_per_gpu(model, tp) * prec.bytes_per_param
        + _sixteen_bit_params_per_gpu(model, tp) * ACTIVATION_BYTES
    )


def kv_bytes_per_token(model: ModelSpec, dtype: KVDtype, tp: int) -> float:
    """KV-cache bytes one token occupies on one shard: 2 x layers x KV heads x (head_dim x bytes
    + scale). The one formula: the simulator, the cost model and the torch backend all use it."""
    vector = kv_bytes_per_vector(dtype, model.head_dim_)
    return 2.0 * model.num_layers * kv_heads_per_gpu(model, tp) * vector


def config_kv_bytes_per_token(model: ModelSpec, config: EngineConfig) -> float:
    """KV-cache bytes per token on one shard of `config` (its cache dtype and TP size)."""
    return kv_bytes_per_token(model, config.kv_dtype, config.tensor_parallel_size)


def activation_workspace_bytes(model: ModelSpec, config: EngineConfig) -> float:
    """Peak activation memory of one forward pass over `max_num_batched_tokens` tokens."""
    tp = config.tensor_parallel_size
    tokens = config.max_num_batched_tokens
    mlp_width = model.intermediate_size * max(1, model.num_experts_per_tok) / tp
    # residual, normed input, attention output, qkv (~4 x hidden) + gate/up/act (3 x mlp width)
    hidden_states = tokens * (4 * model.hidden_size + 3 * mlp_width) * ACTIVATION_BYTES
    logits = min(config.max_num_seqs, tokens) * model.vocab_size * LOGIT_BYTES
    return hidden_states + logits


@dataclass(frozen=True)
class MemoryPlan:
    """Where one GPU's memory goes for a variant, and what KV capacity is left."""

    budget_bytes: float
    weights_bytes: float  # target (+ draft) weights on one shard
    workspace_bytes: float
    runtime_bytes: float
    kv_bytes_per_token: float  # per shard, target (+ draft) cache
    kv_capacity_tokens: int
    kv_capacity_blocks: int
    max_concurrent_seqs: int  # sequences of the workload's full length that fit (<= max_num_seqs)
    feasible: bool
    reason: str | None

    @property
    def weights_gib(self) -> float:
        """Weights on one shard in GiB."""
        return self.weights_bytes / GIB


def plan_memory(
    model: ModelSpec,
    gpu: GPUProfile,
    config: EngineConfig,
    workload: Workload,
    draft: ModelSpec | None = None,
    eff: Efficiency | None = None,
) -> MemoryPlan:
    """Plan one shard's memory; infeasible (numbers given) if weights or a sequence don't fit."""
    tp = config.tensor_parallel_size
    budget = gpu.memory_bytes * config.gpu_memory_utilization
    weights = weight_bytes_per_gpu(model, config.quantization, gpu, tp)
    kv_tok = config_kv_bytes_per_token(model, config)
    if draft is not None:
        # The draft keeps its own KV cache for the same tokens (see DRAFT_QUANTIZATION).
        weights += weight_bytes_per_gpu(draft, DRAFT_QUANTIZATION, gpu, tp)
        kv_tok += config_kv_bytes_per_token(draft, config)
    workspace = activation_workspace_bytes(model, config)
    runtime = resolve_efficiency(eff, gpu).runtime_overhead_bytes
    free = budget - weights - workspace - runtime
    blocks = max(0, int(free // (kv_tok * config.block_size)))
    capacity = blocks * config.block_size
    seq_len = workload.input_tokens + workload.output_tokens
    seq_blocks = math.ceil(seq_len / config.block_size)
    max_seqs = min(config.max_num_seqs, blocks // seq_blocks) if seq_blocks else 0
    reason = None
    what = f"{model.name} {config.quantization.value} tp={tp}"
    if weights > budget:
        reason = (
            f"weights need {weights / GIB:.1f} GiB per GPU ({what}) but the budget is "
            f"{budget / GIB:.1f} GiB ({gpu.memory_gib:g} GiB x gpu_memory_utilization "
            f"{config.gpu_memory_utilization:g})"
        )
    elif free <= 0 or max_seqs < 1:
        reason = (
            f"no room for one {seq_len}-token sequence: budget {budget / GIB:.1f} GiB - weights "
            f"{weights / GIB:.1f} GiB - activations {workspace / GIB:.1f} GiB - runtime "
            f"{runtime / GIB:.1f} GiB leaves {max(free, 0.0) / GIB:.2f} GiB for KV, and one "
            f"sequence needs {seq_len * kv_tok / GIB:.2f} GiB ({what})"
        )
    elif seq_len > model.max_context:
        reason = (
            f"input {workload.input_tokens} + output {workload.output_tokens} tokens exceed "
            f"{model.name}'s max context of {model.max_context}"
        )
    return MemoryPlan(
        budget_bytes=budget,
        weights_bytes=weights,
        workspace_bytes=workspace,
        runtime_bytes=runtime,
        kv_bytes_per_token=kv_tok,
        kv_capacity_tokens=capacity,
        kv_capacity_blocks=blocks,
        max_concurrent_seqs=max(0, max_seqs),
        feasible=reason is None,
        reason=reason,
    )
