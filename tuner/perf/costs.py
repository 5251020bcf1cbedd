"""Roofline time of one engine step holding prefill chunks and decode tokens, on one TP shard.

Each kernel group costs max(FLOPs / achievable FLOPS, bytes / achievable bandwidth); groups run
one after another, so their times add:

  step = fixed overhead (host + per-layer small kernels)
       + dense GEMMs (attention projections, dense MLP)      weights in their stored dtype
       + MoE experts (only the experts the batch touches)    see tuner/perf/moe.py
       + LM head (only for tokens that are sampled)
       + attention: decode reads each sequence's KV once; prefill is causal FLOPs
       + all-reduces when TP > 1 (ring: 2 (tp-1)/tp * bytes / link + latency): after attention
         in every layer, after the MLP of dense layers and of TP-sharded MoE layers

Attention data parallelism (DP ranks of a TP x DP replica): the scheduler sees the replica as
one engine with DP times the limits; rank-local work (dense GEMMs, decode attention, sampling,
all-reduces) runs on the busiest rank's share of the step's tokens, while the MoE layers see
them all. Decodes spread evenly; each prefill chunk's attention is charged in full (a chunk
runs on one rank). MLA (DeepSeek-V3): prefill attention decompresses the
latent (q/k width nope + rope, v width v_head_dim); decode attention runs on the latent
(absorbed projections: per head and cached token, latent + rope MACs for QK and latent MACs for
PV), reading the replicated latent once. Sliding-window layers read at most the window.

Not modelled: pipeline parallelism, uneven expert routing beyond binomial spread, CPU offload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.perf.efficiency import Efficiency, resolve_efficiency
from tuner.perf.kernel_rates import GIGA, TERA, KernelRates, kernel_path, kernel_rates
from tuner.perf.memory import (
    config_kv_bytes_per_token,
    dense_params_per_gpu,
    kv_heads_per_gpu,
    kv_layers_cached,
    replica_shape,
)
from tuner.perf.moe import MoECost, expected_experts_touched
from tuner.perf.moe_kernels import expert_kernel_class, moe_gemm_grid, moe_kernel_engine
from tuner.perf.precision import ACTIVATION_BYTES, dense_quantization
from tuner.specs import EngineConfig, GPUProfile, ModelSpec, MoEKernel, Quantization

__all__ = ["StepCostModel", "expected_experts_touched", "layer_kernels", "step_cost_model"]

# FLOPs per multiply-accumulate.
FLOPS_PER_MAC = 2.0
# QK^T and PV: two matmuls of head_dim MACs per (query, key) pair and head.
ATTENTION_MATMULS = 2.0


# Kernels one decoder layer launches in eager mode, counted from vLLM's model definitions
# (vllm/model_executor/models/llama.py LlamaDecoderLayer.forward, deepseek_v2.py
# DeepseekV2DecoderLayer / DeepseekV2MoE, with their fused norm+residual, rotary and cache-write
# custom ops): a GQA attention block (norm, QKV GEMM, rotary, cache write, attention, output
# GEMM), an MLA block (norm, q_a GEMM, q norm, q_b GEMM, kv_a GEMM, kv norm, rotary, cache
# write, kv_b GEMM, attention, output GEMM), a dense MLP (norm, gate-up GEMM, SiLU-and-mul, down
# GEMM) and a routed-MoE MLP (norm, router GEMM, top-k, token alignment, two grouped GEMMs,
# SiLU-and-mul, combine, the shared expert's three), plus one collective per TP/EP exchange.
ATTENTION_KERNELS = 6
MLA_ATTENTION_KERNELS = 11
DENSE_MLP_KERNELS = 4
MOE_MLP_KERNELS = 11


def layer_kernels(model: ModelSpec, collectives_per_layer: float) -> float:
    """Kernels all the decoder layers of `model` launch in one eager step."""
    attention = MLA_ATTENTION_KERNELS if model.uses_mla else ATTENTION_KERNELS
    mlp = model.num_dense_layers * DENSE_MLP_KERNELS + model.num_moe_layers * MOE_MLP_KERNELS
    return model.num_layers * (attention + collectives_per_layer) + mlp


def _roofline_s(flops: float, flops_per_s: float, nbytes: float, bytes_per_s: float) -> float:
    return max(flops / flops_per_s, nbytes / bytes_per_s)


@dataclass(frozen=True)
class StepCostModel:
    """Precomputed per-shard coefficients; `step_s` is plain float arithmetic (hot path)."""

    fixed_s: float  # host overhead + per-layer small kernels
    dense_params: float  # dense GEMM parameters per shard (all layers)
    dense_io_per_token: float  # activation bytes in/out of the dense GEMMs per token
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
    moe: MoECost | None = None  # routed experts; None for dense models
    dp: int = 1  # attention data-parallel ranks the step's tokens spread over
    decode_attn_flops_per_ctx: float = 0.0  # per query and cached token; 0 = attn_flops_per_ctx
    eager_kernels: float = 0.0  # kernels of every layer a step with no captured graph launches
    eager_kernel_s: float = 0.0  # host time to launch one of them (an engine may measure its own)

    @property
    def eager_s(self) -> float:
        """Host time to launch every kernel of every layer (a step no captured graph covers)."""
        return self.eager_kernels * self.eager_kernel_s

    @property
    def num_experts(self) -> int:
        """Routed experts (0 for a dense model)."""
        return self.moe.num_experts if self.moe else 0

    @property
    def experts_per_token(self) -> int:
        """Routed experts per token (0 for a dense model)."""
        return self.moe.experts_per_token if self.moe else 0

    @property
    def expert_params(self) -> float:
        """One routed expert's parameters on one GPU, all layers (0 for a dense model)."""
        return self.moe.expert_params / self.moe.gpus if self.moe else 0.0

    def gemm_parts(self, num_tokens: float, num_logits: float) -> dict[str, float]:
        """`gemm_s` by kernel group: seconds of each, the dense GEMMs split into their compute
        and memory sides (only the larger one counts in the step; the other reads 0)."""
        total = num_tokens
        if self.dp > 1:
            # The busiest rank sets the pace: a lone prefill runs on one rank, a decode batch
            # spreads over up to DP ranks (one sampled position per sequence).
            ranks = min(float(self.dp), max(1.0, num_logits))
            num_tokens, num_logits = num_tokens / ranks, num_logits / ranks
        compute = FLOPS_PER_MAC * num_tokens * self.dense_params / self.gemm_flops_per_s
        # Memory side: stored weights at the weight kernels' rate plus activations in and out.
        memory = (
            self.dense_params * self.bytes_per_param / self.weight_bytes_per_s
            + num_tokens * self.dense_io_per_token / self.act_bytes_per_s
        )
        parts = {
            "gemm_compute": compute if compute >= memory else 0.0,
            "weight_reads": memory if memory > compute else 0.0,
            "moe_experts": self.moe.time_s(total) if self.moe is not None else 0.0,
            "sampling": num_logits * self.seq_overhead_s,
            "lm_head": 0.0,
            "all_reduce": 0.0,
        }
        if num_logits > 0:
            parts["lm_head"] = _roofline_s(
                FLOPS_PER_MAC * num_logits * self.lm_head_params,
                self.lm_head_flops_per_s,
                self.lm_head_params * ACTIVATION_BYTES,
                self.act_bytes_per_s,
            )
        if self.allreduces_per_step:
            parts["all_reduce"] = self.allreduces_per_step * (
                self.allreduce_latency_s
                + num_tokens * self.allreduce_bytes_per_token / self.allreduce_bytes_per_s
            )
        return parts

    def gemm_s(self, num_tokens: float, num_logits: float) -> float:
        """GEMMs + collectives of a step pushing `num_tokens` through, sampling `num_logits`."""
        return sum(self.gemm_parts(num_tokens, num_logits).values())

    def decode_parts(self, batch: int, ctx_len: float) -> dict[str, float]:
        """One plain decode step of `batch` sequences by kernel group (seconds; they add up to
        `decode_step_s`): fixed overhead, GEMM sides, KV reads or attention compute, ..."""
        parts = {"fixed_overhead": self.fixed_s, **self.gemm_parts(batch, batch)}
        flops = self.decode_attn_flops_per_ctx or self.attn_flops_per_ctx
        compute = batch * ctx_len * flops / self.attn_flops_per_s / self.dp
        reads = batch * ctx_len * self.kv_bytes_per_ctx / self.kv_bytes_per_s / self.dp
        parts["attention_compute"] = compute if compute >= reads else 0.0
        parts["kv_reads"] = reads if reads > compute else 0.0
        return parts

    def decode_attn_s_per_ctx(self, queries_per_seq: float = 1.0) -> float:
        """Attention seconds per context token of a decoding sequence (KV read once per step)."""
        flops = self.decode_attn_flops_per_ctx or self.attn_flops_per_ctx
        return (
            max(
                queries_per_seq * flops / self.attn_flops_per_s,
                self.kv_bytes_per_ctx / self.kv_bytes_per_s,
            )
            / self.dp
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
    kv = model.mla_latent_dim if model.uses_mla else kv_heads_per_gpu(model, tp) * hd
    qkv = d + q + 2 * kv
    o = q + d
    mlp = model.num_dense_layers * (d + 3 * model.intermediate_size / tp + d)
    return (model.num_layers * (qkv + o) + mlp) * ACTIVATION_BYTES


def _link_bytes_per_s(gpu: GPUProfile, gpus: int, eff: Efficiency) -> float:
    """Achievable per-direction bandwidth between `gpus` GPUs: the scale-up link inside its
    domain (NVLink figures are bidirectional totals), else the PCIe-attached NIC."""
    if gpu.nvlink_gbps > 0 and gpus <= gpu.nvlink_domain:
        link = gpu.nvlink_gbps / 2.0
    else:
        link = gpu.pcie_gbps
    return link * GIGA * eff.interconnect_fraction


def _attention_flops(model: ModelSpec, tp: int) -> tuple[float, float]:
    """(prefill, decode) attention FLOPs per query token and cached token, all layers, a shard."""
    heads = model.num_attention_heads / tp
    layers = model.num_layers
    if model.uses_mla:
        prefill = FLOPS_PER_MAC * heads * (model.head_dim_ + (model.v_head_dim or 0)) * layers
        latent = model.kv_lora_rank or 0
        decode = FLOPS_PER_MAC * heads * (model.mla_latent_dim + latent) * layers
        return prefill, decode
    full = ATTENTION_MATMULS * FLOPS_PER_MAC * heads * model.head_dim_
    return full * kv_layers_cached(model, None), 0.0


def _moe_cost(
    model: ModelSpec,
    gpu: GPUProfile,
    config: EngineConfig,
    eff: Efficiency,
    rates: KernelRates,
    cls: str,
) -> MoECost | None:
    """Routed-expert coefficients of `config`'s replica (`cls`: the experts' kernel class), or
    None for a dense model."""
    if not model.is_moe:
        return None
    tp, dp = replica_shape(config)
    engine, cc = config.engine.value, gpu.compute_capability
    gpus = tp * dp
    return MoECost(
        num_experts=model.num_experts,
        experts_per_token=model.num_experts_per_tok,
        expert_params=model.num_moe_layers * model.mlp_params_per_expert,
        gpus=gpus,
        expert_parallel=bool(config.expert_parallel),
        data_parallel=dp,
        moe_layers=model.num_moe_layers,
        bytes_per_param=rates.precision.bytes_per_param,
        gemm_flops_per_s=rates.gemm_rate,
        weight_bytes_per_s=rates.weight_rate,
        token_bytes=model.hidden_size * ACTIVATION_BYTES,
        link_bytes_per_s=_link_bytes_per_s(gpu, tp * dp, eff),
        exchange_latency_s=eff.allreduce_latency_s,
        grid=moe_gemm_grid(moe_kernel_engine(engine, cls, cc), cls, gpu.name),
        peak_flops_per_s=rates.peak_flops_per_s,
        peak_bytes_per_s=gpu.memory_bandwidth_gbps * GIGA,
        expert_cols=model.expert_intermediate_size / (1 if config.expert_parallel else gpus),
    )


def _expert_class(
    config: EngineConfig, gpu: GPUProfile, quant: Quantization, rates: KernelRates
) -> str:
    """The measured grid's class of the routed experts' kernels, stored in `quant`
    (tuner.perf.moe_kernels)."""
    marlin = config.moe_kernel == MoEKernel.marlin
    mxfp4 = quant is Quantization.mxfp4
    return expert_kernel_class(
        rates.kernel_class, mxfp4, config.engine.value, gpu.compute_capability, marlin
    )


def _collectives_per_layer(config: EngineConfig, model: ModelSpec) -> float:
    """TP all-reduces (after attention and the MLP) or MoE exchanges per layer, on average."""
    tp, dp = replica_shape(config)
    exchanges = 2.0 if tp > 1 else 0.0
    if model.num_moe_layers and dp > 1:
        exchanges = max(
            exchanges, 2.0 * model.num_moe_layers / model.num_layers
        )  # dispatch, combine
    return exchanges


def step_cost_model(
    model: ModelSpec,
    gpu: GPUProfile,
    config: EngineConfig,
    eff: Efficiency | None = None,
    quantization: Quantization | None = None,
    context: float | None = None,
) -> StepCostModel:
    """Coefficients of the step-time roofline for `model` under `config` on one GPU of `gpu`
    (`context`: typical cached tokens per sequence, for sliding-window layers)."""
    eff = resolve_efficiency(eff, gpu)
    tp, dp = replica_shape(config)
    quant = quantization or config.quantization
    d, layers = model.hidden_size, model.num_layers
    bw = gpu.memory_bandwidth_gbps * GIGA
    # MXFP4 on NVIDIA GPUs quantizes the routed experts only (tuner.perf.precision).
    dense = kernel_rates(dense_quantization(quant, gpu), gpu, eff, d)
    moe_rates = kernel_rates(quant, gpu, eff, d)
    expert_cls = _expert_class(config, gpu, quant, moe_rates)
    prec, gemm_rate, weight_rate = dense.precision, dense.gemm_rate, dense.weight_rate
    bus_rate = _link_bytes_per_s(gpu, tp, eff) * tp / (2.0 * (tp - 1)) if tp > 1 else 1.0
    # After attention in every layer, after every dense MLP, and after every MoE layer of a
    # replica without attention DP: its tokens are already on every GPU, so expert parallelism
    # only changes which GPU holds which expert and the partial outputs are all-reduced as with
    # TP-sharded experts (vLLM FusedMoEParallelConfig.use_all2all_kernels = dp_size > 1 and
    # use_ep; SGLang's moe_a2a_backend defaults to none; TensorRT-LLM's MoE all-to-all needs
    # enable_attention_dp). Attention-DP ranks exchange their MoE tokens in MoECost instead.
    moe_allreduce = dp == 1
    allreduces = layers + model.num_dense_layers + (model.num_moe_layers if moe_allreduce else 0)
    prefill_flops, decode_flops = _attention_flops(model, tp)
    if not model.uses_mla and context is not None:
        prefill_flops *= kv_layers_cached(model, context) / layers
    return StepCostModel(
        fixed_s=eff.step_overhead_s + layers * eff.layer_overhead_s,
        eager_kernels=layer_kernels(model, _collectives_per_layer(config, model)),
        eager_kernel_s=eff.eager_launch_s,
        seq_overhead_s=eff.seq_step_overhead_s,
        dense_params=dense_params_per_gpu(model, tp),
        dense_io_per_token=_dense_io_per_token(model, tp),
        moe=_moe_cost(model, gpu, config, eff, moe_rates, expert_cls),
        dp=dp,
        lm_head_params=model.vocab_size * d / tp,
        bytes_per_param=prec.bytes_per_param,
        gemm_flops_per_s=gemm_rate,
        weight_bytes_per_s=weight_rate,
        lm_head_flops_per_s=gpu.fp16_tflops * TERA * eff.gemm_flops_fraction,
        act_bytes_per_s=bw * eff.weight_bandwidth_fraction,
        attn_flops_per_ctx=prefill_flops,
        decode_attn_flops_per_ctx=decode_flops,
        attn_flops_per_s=gpu.fp16_tflops * TERA * eff.attention_flops_fraction,
        kv_bytes_per_ctx=config_kv_bytes_per_token(model, config, context),
        kv_bytes_per_s=bw * eff.kv_bandwidth_fraction,
        allreduces_per_step=allreduces if tp > 1 else 0,
        allreduce_bytes_per_token=d * ACTIVATION_BYTES,
        # Small-message all-reduce latency grows with the rounds of recursive doubling,
        # log2(tp) (the alpha log p term of the alpha-beta model): 1x at TP2, 3x at TP8.
        allreduce_latency_s=eff.allreduce_latency_s * math.log2(tp) if tp > 1 else 0.0,
        allreduce_bytes_per_s=bus_rate,
        kernel_path=kernel_path(prec, moe_rates.precision, model.is_moe, expert_cls),
    )
