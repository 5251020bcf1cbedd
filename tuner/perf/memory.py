"""Memory planner: weight and KV bytes per GPU, KV capacity, and why a variant does not fit.

`gpu_memory_utilization` is exported as each engine's own memory fraction, and each engine sizes
its paged KV pool (in blocks of `block_size` tokens) from it by its own rule (`kv_pool_bytes`):
vLLM's fraction of device memory holds the weights, the activation peak of a
`max_num_batched_tokens` forward pass, the runtime's own allocations and the KV pool; SGLang's
`--mem-fraction-static` holds only the weights and the KV pool; TensorRT-LLM's
`free_gpu_memory_fraction` is a fraction of what the weights, the profiled activation peak and
the runtime leave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.precision import (
    ACTIVATION_BYTES,
    DRAFT_QUANTIZATION,
    dense_quantization,
    kv_bytes_per_vector,
    precision_for,
)
from tuner.specs import Engine, EngineConfig, GPUProfile, KVDtype, ModelSpec, Quantization, Workload

__all__ = [
    "GIB",
    "attention_params_per_gpu",
    "dense_params_per_gpu",
    "kv_layers_cached",
    "replica_gpus",
    "replica_shape",
    "routed_params_per_gpu",
    "MemoryPlan",
    "activation_workspace_bytes",
    "config_kv_bytes_per_token",
    "embedding_bytes_per_gpu",
    "kv_bytes_per_token",
    "kv_heads_per_gpu",
    "kv_pool_bytes",
    "plan_memory",
    "weight_bytes_per_gpu",
]

GIB = 1024.0**3
# Logits are materialised in fp32 for sampling.
LOGIT_BYTES = 4.0


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each TP shard stores: sharded, or replicated when there are fewer than `tp`."""
    return max(1, math.ceil(model.num_kv_heads / tp))


def replica_shape(config: EngineConfig) -> tuple[int, int]:
    """(tensor-parallel size, attention data-parallel ranks) of one engine replica."""
    return config.tensor_parallel_size, config.data_parallel_size


def replica_gpus(config: EngineConfig) -> int:
    """GPUs one engine replica occupies: TP x DP (every DP rank holds a TP group)."""
    tp, dp = replica_shape(config)
    return tp * dp


def attention_params_per_gpu(model: ModelSpec, tp: int) -> float:
    """Attention projection parameters of one layer on one TP shard."""
    d = model.hidden_size
    if model.uses_mla:
        # MLA's down-projections (to the query and KV latents) are replicated, not sharded.
        replicated = d * ((model.q_lora_rank or 0) + model.mla_latent_dim)
        return replicated + (model.attention_params_per_layer - replicated) / tp
    hd = model.head_dim_
    q_out = model.num_attention_heads * hd
    kv_out = kv_heads_per_gpu(model, tp) * hd
    return 2 * d * q_out / tp + 2 * d * kv_out


def dense_params_per_gpu(model: ModelSpec, tp: int) -> float:
    """Block GEMM parameters every token passes through on one TP shard (all layers): attention,
    dense-layer MLPs, shared experts (TP-sharded in every engine) and routers (replicated)."""
    moe = model.num_moe_layers
    return (
        model.num_layers * attention_params_per_gpu(model, tp)
        + model.num_dense_layers * model.dense_mlp_params / tp
        + moe * (model.shared_expert_params / tp + model.router_params)
    )


def routed_params_per_gpu(model: ModelSpec, tp: int, dp: int = 1) -> float:
    """Routed-expert parameters on one GPU: spread over all TP x DP GPUs of the replica, whole
    experts under expert parallelism or a 1/(TP x DP) slice of every expert without it."""
    return model.routed_expert_params / (tp * dp)


def _sixteen_bit_params_per_gpu(model: ModelSpec, tp: int) -> float:
    """Embedding and LM head (vocab-parallel) plus norms (replicated), kept in 16 bits."""
    return model.embedding_params / tp + model.norm_params


def embedding_bytes_per_gpu(model: ModelSpec, tp: int) -> float:
    """The embedding and LM head's share of `weight_bytes_per_gpu` (16-bit, vocab-parallel)."""
    return model.embedding_params / tp * ACTIVATION_BYTES


def weight_bytes_per_gpu(
    model: ModelSpec, quant: Quantization, gpu: GPUProfile, tp: int, dp: int = 1
) -> float:
    """Stored weight bytes on one GPU: quantized GEMMs (with scales) + 16-bit rest. The routed
    experts are stored in `quant`; the dense GEMMs in its dense partner (`dense_quantization`:
    16-bit under NVIDIA MXFP4)."""
    experts = precision_for(quant, gpu, model.hidden_size)
    dense = precision_for(dense_quantization(quant, gpu), gpu, model.hidden_size)
    return (
        dense_params_per_gpu(model, tp) * dense.bytes_per_param
        + routed_params_per_gpu(model, tp, dp) * experts.bytes_per_param
        + _sixteen_bit_params_per_gpu(model, tp) * ACTIVATION_BYTES
    )


def kv_layers_cached(model: ModelSpec, context: float | None = None) -> float:
    """Layers whose cache grows with the context, in full-layer equivalents at `context` tokens:
    sliding-window layers keep only the window (vLLM's hybrid allocator frees the rest)."""
    sliding = model.num_sliding_layers
    if not sliding or context is None or context <= 0:
        return float(model.num_layers)
    window = model.sliding_window or context
    return model.num_layers - sliding + sliding * min(1.0, window / context)


def kv_bytes_per_token(
    model: ModelSpec, dtype: KVDtype, tp: int, context: float | None = None
) -> float:
    """KV-cache bytes one token occupies on one shard: 2 x layers x KV heads x (head_dim x bytes
    + scale), or under MLA layers x (latent + RoPE key), replicated on every TP shard. The one
    formula: the simulator, the cost model and the torch backend all use it."""
    layers = kv_layers_cached(model, context)
    if model.uses_mla:
        return layers * kv_bytes_per_vector(dtype, model.mla_latent_dim)
    vector = kv_bytes_per_vector(dtype, model.head_dim_)
    return 2.0 * layers * kv_heads_per_gpu(model, tp) * vector


def config_kv_bytes_per_token(
    model: ModelSpec, config: EngineConfig, context: float | None = None
) -> float:
    """KV-cache bytes per token on one shard of `config` (its cache dtype and TP size)."""
    return kv_bytes_per_token(model, config.kv_dtype, config.tensor_parallel_size, context)


def activation_workspace_bytes(model: ModelSpec, config: EngineConfig) -> float:
    """Peak activation memory of one forward pass over `max_num_batched_tokens` tokens."""
    tp = config.tensor_parallel_size
    tokens = config.max_num_batched_tokens
    if model.is_moe:
        mlp_width = (
            max(
                model.intermediate_size,
                model.expert_intermediate_size
                * (model.num_experts_per_tok + model.num_shared_experts),
            )
            / tp
        )
    else:
        mlp_width = model.intermediate_size / tp
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


def kv_pool_bytes(
    engine: Engine, memory: float, fraction: float, weights: float, transient: float
) -> tuple[float, float]:
    """(budget the weights must fit in, bytes left for the KV pool) of one GPU of `memory` bytes
    under `engine`'s rule for its memory `fraction`; `transient` = activation peak + runtime."""
    if engine is Engine.trtllm:
        # KvCacheCreator.configure_kv_cache_capacity / _cal_max_memory
        # (tensorrt_llm/_torch/pyexecutor/_util.py): after a profiling forward pass, the KV pool
        # is free_gpu_memory_fraction x (total - weights - activation peak - non-torch memory).
        budget = memory - transient
        return budget, fraction * (budget - weights)
    if engine is Engine.sglang:
        # ModelRunner.profile_max_num_token (sglang model_runner_kv_cache_mixin.py, v0.5.8
        # l.111-144): KV = free memory after the weights load - total x (1 - mem_fraction_static);
        # activations and CUDA graphs live in that reserve, outside the fraction.
        budget = memory * fraction
        return budget, budget - weights
    # vLLM (v1/worker/gpu_worker.py Worker.determine_available_memory, 0.32.0 l.634-745): the
    # requested gpu_memory_utilization x total, less the non-KV memory the profiling run
    # measured (weights, activation peak, non-torch allocations) and the CUDA-graph estimate.
    budget = memory * fraction
    return budget, budget - weights - transient


# `kv_pool_bytes`'s rule per engine, as the infeasibility reasons say it.
_KV_RULES = {
    Engine.vllm: "gpu_memory_utilization x memory - weights - activations - runtime",
    Engine.sglang: "gpu_memory_utilization x memory - weights",
    Engine.trtllm: "gpu_memory_utilization x (memory - weights - activations - runtime)",
}


def _budget_rule(config: EngineConfig, gpu: GPUProfile) -> str:
    """How the weights' budget was set, in the engine's own terms."""
    if config.engine is Engine.trtllm:
        return f"{gpu.memory_gib:g} GiB less activations and runtime"
    return f"{gpu.memory_gib:g} GiB x gpu_memory_utilization {config.gpu_memory_utilization:g}"


def plan_memory(
    model: ModelSpec,
    gpu: GPUProfile,
    config: EngineConfig,
    workload: Workload,
    draft: ModelSpec | None = None,
    eff: Efficiency | None = None,
    mtp: ModelSpec | None = None,
) -> MemoryPlan:
    """Plan one GPU's memory; infeasible (numbers given) if weights or a sequence don't fit.

    Under attention data parallelism every DP rank keeps its own sequences' KV on its own GPUs,
    so the KV capacity and concurrent sequences reported are the replica's (all ranks)."""
    tp, dp = replica_shape(config)
    seq_len = workload.input_tokens + workload.output_tokens
    weights = weight_bytes_per_gpu(model, config.quantization, gpu, tp, dp)
    kv_tok = config_kv_bytes_per_token(model, config, seq_len)
    if draft is not None:
        # The draft keeps its own KV cache for the same tokens (see DRAFT_QUANTIZATION).
        weights += weight_bytes_per_gpu(draft, DRAFT_QUANTIZATION, gpu, tp)
        kv_tok += config_kv_bytes_per_token(draft, config, seq_len)
    if mtp is not None:
        # The target's MTP layers (ModelSpec.mtp_module), in the checkpoint's precision; their
        # embedding and LM head are the target's. They cache KV for the same tokens.
        weights += weight_bytes_per_gpu(mtp, config.quantization, gpu, tp, dp)
        weights -= embedding_bytes_per_gpu(mtp, tp)
        kv_tok += config_kv_bytes_per_token(mtp, config, seq_len)
    workspace = activation_workspace_bytes(model, config)
    runtime = resolve_efficiency(eff, gpu).runtime_overhead_bytes
    budget, free = kv_pool_bytes(
        config.engine, gpu.memory_bytes, config.gpu_memory_utilization, weights, workspace + runtime
    )
    blocks = max(0, int(free // (kv_tok * config.block_size)))
    capacity = blocks * config.block_size
    seq_blocks = math.ceil(seq_len / config.block_size)
    max_seqs = min(config.max_num_seqs, blocks // seq_blocks) if seq_blocks else 0
    reason = None
    layout = f" dp={dp}" if dp > 1 else ""
    ep = " ep" if config.expert_parallel else ""
    what = f"{model.name} {config.quantization.value} tp={tp}{layout}{ep}"
    if weights > budget:
        reason = (
            f"weights need {weights / GIB:.1f} GiB per GPU ({what}) but the budget is "
            f"{budget / GIB:.1f} GiB ({_budget_rule(config, gpu)})"
        )
    elif config.engine is Engine.sglang and workspace + runtime > gpu.memory_bytes - budget:
        reason = (
            f"SGLang keeps activations and runtime outside --mem-fraction-static: they need "
            f"{(workspace + runtime) / GIB:.1f} GiB but 1 - gpu_memory_utilization "
            f"{config.gpu_memory_utilization:g} leaves {(gpu.memory_bytes - budget) / GIB:.1f} "
            f"GiB of {gpu.memory_gib:g} GiB ({what}); lower gpu_memory_utilization or "
            f"max_num_batched_tokens"
        )
    elif free <= 0 or max_seqs < 1:
        reason = (
            f"no room for one {seq_len}-token sequence: {_KV_RULES[config.engine]} leaves "
            f"{max(free, 0.0) / GIB:.2f} GiB for KV (budget {budget / GIB:.1f} GiB, weights "
            f"{weights / GIB:.1f} GiB, activations {workspace / GIB:.1f} GiB, runtime "
            f"{runtime / GIB:.1f} GiB), and one sequence needs {seq_len * kv_tok / GIB:.2f} GiB "
            f"({what})"
        )
    elif seq_len > model.max_context:
        reason = (
            f"input {workload.input_tokens} + output {workload.output_tokens} tokens exceed "
            f"{model.name}'s max context of {model.max_context}"
        )
    blocks, capacity, max_seqs = blocks * dp, capacity * dp, max_seqs * dp
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
