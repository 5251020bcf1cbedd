"""Roofline time of one engine step holding prefill chunks and decode tokens, on one TP shard.

Each kernel group costs max(FLOPs / achievable FLOPS, bytes / achievable bandwidth); groups run
one after another, so their times add:

  step = fixed overhead (host + per-layer small kernels)
       + dense GEMMs (attention projections, dense MLP)      weights in their stored dtype
       + MoE experts (only the experts the batch touches)    E * (1 - (1 - k/E)^tokens)
       + LM head (only for tokens that are sampled)
       + attention: decode reads each sequence's KV once; prefill is causal FLOPs
       + 2 all-reduces per layer when TP > 1 (ring: 2 (tp-1)/tp * bytes / link + latency)

Not modelled: sliding-window attention (full context is charged: conservative), pipeline
parallelism, and CPU offload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.memory import config_kv_bytes_per_token, kv_heads_per_gpu
from tuner.perf.precision import ACTIVATION_BYTES, precision_for
from tuner.specs import EngineConfig, GPUProfile, ModelSpec, Quantization

__all__ = ["StepCostModel", "expected_experts_touched", "step_cost_model"]

TERA = 1e12
GIGA = 1e9
# FLOPs per multiply-accumulate.
FLOPS_PER_MAC = 2.0
# QK^T and PV: two matmuls of head_dim MACs per (query, key) pair and head.
ATTENTION_MATMULS = 2.0


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected distinct experts a batch of `tokens` routes to (uniform routing)."""
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** tokens)


def _roofline_s(flops: float, flops_per_s: float, nbytes: float, bytes_per_s: float) -> float:
    return max(flops / flops_per_s, nbytes / bytes_per_s)


@dataclass(frozen=True)
class StepCostModel:
    """Precomputed per-shard coefficients; `step_s` is plain float arithmetic (hot path)."""

    fixed_s: float  # host overhead + per-layer small kernels
    dense_params: float  # dense GEMM parameters per shard (all layers)
    dense_io_per_token: float  # activation bytes in/out of the dense GEMMs per token
    expert_params: float  # one expert's parameters per shard (all layers); 0 for dense
    num_experts: int
    experts_per_token: int
    lm_head_params: float
    bytes_per_param: float
    gemm_flops_per_s: float  # achievable, dequant slowdown included
    weight_bytes_per_s: float  # achievable, weight-only kernel factor included
    lm_head_flops_per_s: float
    act_bytes_per_s: float
    attn_flops_per_ctx: float  # per query token per context token, all layers, this shard
    attn_flops_per_s: float
    kv_bytes_per_ctx: float  # KV bytes per context token, all layers, this shard
    kv_bytes_per_s: float
    allreduces_per_step: int  # 0 when tp == 1
    allreduce_bytes_per_token: float
    allreduce_latency_s: float
    allreduce_bytes_per_s: float  # ring bus bandwidth: link x fraction x tp / (2 (tp - 1))
    kernel_path: str
    seq_overhead_s: float = 0.0  # host work per sampled position per step (sampling, output)

    def gemm_s(self, num_tokens: float, num_logits: float) -> float:
        """GEMMs + all-reduces of a step pushing `num_tokens` through, sampling `num_logits`."""
        # Memory side: stored weights at the weight kernels' rate plus activations in and out.
        t = max(
            FLOPS_PER_MAC * num_tokens * self.dense_params / self.gemm_flops_per_s,
            self.dense_params * self.bytes_per_param / self.weight_bytes_per_s
            + num_tokens * self.dense_io_per_token / self.act_bytes_per_s,
        )
        if self.num_experts:
            touched = expected_experts_touched(self.num_experts, self.experts_per_token, num_tokens)
            t += _roofline_s(
                FLOPS_PER_MAC * num_tokens * self.experts_per_token * self.expert_params,
                self.gemm_flops_per_s,
                touched * self.expert_params * self.bytes_per_param,
                self.weight_bytes_per_s,
            )
        if num_logits > 0:
            t += num_logits * self.seq_overhead_s
            t += _roofline_s(
                FLOPS_PER_MAC * num_logits * self.lm_head_params,
                self.lm_head_flops_per_s,
                self.lm_head_params * ACTIVATION_BYTES,
                self.act_bytes_per_s,
            )
        if self.allreduces_per_step:
            t += self.allreduces_per_step * (
                self.allreduce_latency_s
                + num_tokens * self.allreduce_bytes_per_token / self.allreduce_bytes_per_s
            )
        return t

    def decode_attn_s_per_ctx(self, queries_per_seq: float = 1.0) -> float:
        """Attention seconds per context token of a decoding sequence (KV read once per step)."""
        return max(
            queries_per_seq * self.attn_flops_per_ctx / self.attn_flops_per_s,
            self.kv_bytes_per_ctx / self.kv_bytes_per_s,
        )

    def prefill_attn_s(self, chunk: float, ctx_before: float) -> float:
        """Causal attention of a `chunk`-token prefill chunk after `ctx_before` cached tokens."""
        pairs = chunk * (ctx_before + (chunk + 1) / 2.0)
        return _roofline_s(
            pairs * self.attn_flops_per_ctx,
            self.attn_flops_per_s,
            (ctx_before + chunk) * self.kv_bytes_per_ctx,
            self.kv_bytes_per_s,
        )

    def step_s(
        self,
        num_tokens: float,
        num_logits: float,
        decode_ctx_sum: float = 0.0,
        prefill_attn_s: float = 0.0,
        queries_per_seq: float = 1.0,
    ) -> float:
        """Duration of one step; `decode_ctx_sum` sums the decoding sequences' context lengths."""
        return (
            self.fixed_s
            + self.gemm_s(num_tokens, num_logits)
            + decode_ctx_sum * self.decode_attn_s_per_ctx(queries_per_seq)
            + prefill_attn_s
        )

    def decode_step_s(self, batch: int, ctx_len: float) -> float:
        """One plain decode step of `batch` sequences that each hold `ctx_len` tokens."""
        return self.step_s(batch, batch, batch * ctx_len)


def _dense_io_per_token(model: ModelSpec, tp: int) -> float:
    """Activation elements read + written by the dense GEMMs of all layers, per token."""
    d, hd = model.hidden_size, model.head_dim_
    q = model.num_attention_heads * hd / tp
    kv = kv_heads_per_gpu(model, tp) * hd
    qkv = d + q + 2 * kv
    o = q + d
    mlp = 0.0 if model.is_moe else d + 3 * model.intermediate_size / tp + d
    return model.num_layers * (qkv + o + mlp) * ACTIVATION_BYTES


def step_cost_model(
    model: ModelSpec,
    gpu: GPUProfile,
    config: EngineConfig,
    eff: Efficiency | None = None,
    quantization: Quantization | None = None,
) -> StepCostModel:
    """Coefficients of the step-time roofline for `model` under `config` on one shard of `gpu`."""
    eff = resolve_efficiency(eff, gpu)
    tp = config.tensor_parallel_size
    quant = quantization or config.quantization
    prec = precision_for(quant, gpu, model.hidden_size)
    d, hd, layers = model.hidden_size, model.head_dim_, model.num_layers
    kv_out = kv_heads_per_gpu(model, tp) * hd
    attn_params = 2 * d * model.num_attention_heads * hd / tp + 2 * d * kv_out
    if model.is_moe:
        dense = layers * (attn_params + d * model.num_experts)  # router is tiny and dense
        expert = layers * model.mlp_params_per_expert / tp
    else:
        dense = layers * (attn_params + model.mlp_params_per_expert / tp)
        expert = 0.0
    bw = gpu.memory_bandwidth_gbps * GIGA
    low_precision = prec.gemm_tflops > gpu.fp16_tflops
    flops_fraction = (
        eff.low_precision_gemm_flops_fraction if low_precision else eff.gemm_flops_fraction
    )
    gemm_rate = prec.gemm_tflops * TERA * flops_fraction
    weight_rate = bw * eff.weight_bandwidth_fraction
    if prec.weight_only:
        gemm_rate /= 1.0 + eff.weight_only_dequant_overhead
        weight_rate *= eff.weight_only_bandwidth_factor
    if tp > 1:
        # NVLink figures are bidirectional totals; PCIe figures are per direction.
        link = gpu.nvlink_gbps / 2.0 if gpu.nvlink_gbps > 0 else gpu.pcie_gbps
        bus_rate = link * GIGA * eff.interconnect_fraction * tp / (2.0 * (tp - 1))
    else:
        bus_rate = 1.0
    heads = model.num_attention_heads / tp
    return StepCostModel(
        fixed_s=eff.step_overhead_s + layers * eff.layer_overhead_s,
        seq_overhead_s=eff.seq_step_overhead_s,
        dense_params=dense,
        dense_io_per_token=_dense_io_per_token(model, tp),
        expert_params=expert,
        num_experts=model.num_experts if model.is_moe else 0,
        experts_per_token=model.num_experts_per_tok,
        lm_head_params=model.vocab_size * d / tp,
        bytes_per_param=prec.bytes_per_param,
        gemm_flops_per_s=gemm_rate,
        weight_bytes_per_s=weight_rate,
        lm_head_flops_per_s=gpu.fp16_tflops * TERA * eff.gemm_flops_fraction,
        act_bytes_per_s=bw * eff.weight_bandwidth_fraction,
        attn_flops_per_ctx=ATTENTION_MATMULS * FLOPS_PER_MAC * heads * hd * layers,
        attn_flops_per_s=gpu.fp16_tflops * TERA * eff.attention_flops_fraction,
        kv_bytes_per_ctx=config_kv_bytes_per_token(model, config),
        kv_bytes_per_s=bw * eff.kv_bandwidth_fraction,
        allreduces_per_step=2 * layers if tp > 1 else 0,
        allreduce_bytes_per_token=d * ACTIVATION_BYTES,
        # Small-message all-reduce latency grows with the rounds of recursive doubling,
        # log2(tp) (the alpha log p term of the alpha-beta model): 1x at TP2, 3x at TP8.
        allreduce_latency_s=eff.allreduce_latency_s * math.log2(tp) if tp > 1 else 0.0,
        allreduce_bytes_per_s=bus_rate,
        kernel_path=prec.label,
    )
