"""The pydantic nouns of tuner: every input and output is one of these models."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from tuner.calibration_schema import Calibration
from tuner.knobs.declared import KVDtype, Quantization
from tuner.knobs.models import (
    EngineConfigBase,
    IntKnob,
    IntRange,
    SearchSpaceBase,
    build_engine_config,
    build_search_space,
)
from tuner.knobs.models import (
    Strict as _Strict,
)
from tuner.metrics import Metrics, Percentiles

__all__ = [
    "DEFAULT_ACCEPTANCE",
    "DEFAULT_NGRAM_ACCEPTANCE",
    "DEFAULT_SAMPLER",
    "SAMPLERS",
    "Architecture",
    "Context",
    "EngineConfig",
    "GPUProfile",
    "IntKnob",
    "IntRange",
    "KVDtype",
    "Metrics",
    "ModelSpec",
    "Percentiles",
    "Quantization",
    "SLA",
    "SearchSpace",
    "Workload",
    "bytes_per_weight",
]


# Steady-state sizing (the same in every backend; see tuner/bench/arrivals.py): P99 of 200
# samples rests on two samples beyond it; each closed-loop user cycles at least 4 measured
# times; open loop warms up on a tenth of the measured count while the queue fills.
MIN_MEASURED_REQUESTS = 200
MEASURED_ROUNDS_PER_USER = 4
OPEN_LOOP_WARMUP_FRACTION = 0.1


# ----------------------------------------------------------------------------- enums


class Architecture(str, Enum):
    """GPU micro-architecture generation; decides which tensor-core dtypes exist."""

    ampere = "ampere"
    ada = "ada"
    hopper = "hopper"
    blackwell = "blackwell"
    cpu = "cpu"  # a host CPU measured by `tuner.detect_cpu`, not a datasheet GPU


# Bits of one stored weight element, before scales/zero-points (see perf.memory).
_WEIGHT_BITS: dict[Quantization, int] = {
    Quantization.bf16: 16,
    Quantization.fp16: 16,
    Quantization.fp8: 8,
    Quantization.int8: 8,
    Quantization.int8_wo: 8,
    Quantization.int4_awq: 4,
    Quantization.int4_gptq: 4,
}


def bytes_per_weight(quant: Quantization) -> float:
    """Bytes of one stored weight element for a quantization, excluding scales."""
    return _WEIGHT_BITS[quant] / 8.0


# ----------------------------------------------------------------------------- hardware


class GPUProfile(_Strict):
    """One GPU model's datasheet numbers (dense tensor-core peaks, not sparse)."""

    name: str = Field(description="Catalog name, e.g. h200-sxm")
    display_name: str = Field(description="Vendor's product name")
    aliases: list[str] = Field(default_factory=list, description="Names NVML reports")
    architecture: Architecture
    sm_count: int = Field(gt=0)
    memory_gib: float = Field(gt=0, description="Device memory as marketed (GB ~ GiB for HBM)")
    memory_bandwidth_gbps: float = Field(gt=0, description="Peak DRAM bandwidth, GB/s")
    fp16_tflops: float = Field(gt=0, description="Dense FP16/BF16 tensor TFLOPS")
    fp8_tflops: float = Field(ge=0, description="Dense FP8 tensor TFLOPS; 0 = unsupported")
    int8_tops: float = Field(ge=0, description="Dense INT8 tensor TOPS")
    int4_tops: float = Field(ge=0, description="Dense INT4 tensor TOPS; 0 = unsupported")
    l2_mib: float = Field(gt=0)
    nvlink_gbps: float = Field(ge=0, description="NVLink bandwidth per GPU (GB/s, total); 0 = none")
    pcie_gbps: float = Field(gt=0, description="PCIe bandwidth per direction, GB/s")
    tdp_w: float = Field(ge=0, description="Board power, W; 0 = unknown (no energy estimate)")
    source: str = Field(min_length=8, description="Datasheet URL")
    calibration: Calibration | None = Field(
        default=None, description="Fitted by `tuner calibrate` on this device; None = datasheet"
    )

    @property
    def supports_fp8(self) -> bool:
        """Whether FP8 tensor-core math exists on this GPU."""
        return self.fp8_tflops > 0

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes."""
        return self.memory_gib * 1024**3

    @property
    def interconnect_gbps(self) -> float:
        """Bandwidth available to tensor-parallel collectives: NVLink when present, else PCIe."""
        return self.nvlink_gbps if self.nvlink_gbps > 0 else self.pcie_gbps


# ----------------------------------------------------------------------------- model


class ModelSpec(_Strict):
    """Architecture numbers of a decoder-only transformer, as in its HF config.json."""

    name: str
    hf_id: str | None = Field(default=None, description="Hugging Face repository id")
    family: str = Field(default="llama", description="model_type of the HF config")
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, gt=0, description="Defaults to hidden/heads")
    intermediate_size: int = Field(gt=0, description="Dense MLP width (per expert for MoE)")
    vocab_size: int = Field(gt=0)
    num_experts: int = Field(default=0, ge=0, description="0 = dense model")
    num_experts_per_tok: int = Field(default=0, ge=0)
    tie_word_embeddings: bool = False
    attention_bias: bool = Field(default=False, description="q/k/v projections carry a bias")
    sliding_window: int | None = Field(default=None, gt=0)
    max_context: int = Field(gt=0, description="max_position_embeddings")
    rope_theta: float = Field(default=10000.0, gt=0, description="RoPE base frequency")
    rms_norm_eps: float = Field(default=1e-5, gt=0)
    published_params_b: float | None = Field(
        default=None, gt=0, description="Parameter count the publisher states, billions"
    )

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} must be in 1..num_experts="
                f"{self.num_experts}"
            )
        if not self.num_experts and self.num_experts_per_tok:
            raise ValueError("num_experts_per_tok is set but num_experts is 0 (dense model)")
        return self

    @property
    def head_dim_(self) -> int:
        """Per-head dimension (explicit or hidden_size / heads)."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.num_experts > 1

    @property
    def attention_params_per_layer(self) -> int:
        """Parameters of q, k, v, o projections in one layer (plus q/k/v bias)."""
        d, hd = self.hidden_size, self.head_dim_
        q = self.num_attention_heads * hd
        kv = self.num_kv_heads * hd
        bias = (q + 2 * kv) if self.attention_bias else 0
        return d * q + 2 * d * kv + q * d + bias

    @property
    def mlp_params_per_expert(self) -> int:
        """Parameters of one gated (SwiGLU/GeGLU) MLP: gate, up, down."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def mlp_params_per_layer(self) -> int:
        """All MLP parameters of one layer (every expert plus the router)."""
        if self.is_moe:
            router = self.hidden_size * self.num_experts
            return self.num_experts * self.mlp_params_per_expert + router
        return self.mlp_params_per_expert

    @property
    def active_mlp_params_per_layer(self) -> int:
        """MLP parameters one token touches in one layer."""
        if self.is_moe:
            return (
                self.num_experts_per_tok * self.mlp_params_per_expert
                + self.hidden_size * self.num_experts
            )
        return self.mlp_params_per_expert

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (once if tied)."""
        emb = self.vocab_size * self.hidden_size
        return emb if self.tie_word_embeddings else 2 * emb

    @property
    def norm_params(self) -> int:
        """RMSNorm weights: two per layer plus the final norm."""
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def num_params(self) -> int:
        """Total parameter count."""
        per_layer = self.attention_params_per_layer + self.mlp_params_per_layer
        return self.num_layers * per_layer + self.embedding_params + self.norm_params

    @property
    def num_active_params(self) -> int:
        """Parameters touched per token (differs from num_params only for MoE)."""
        per_layer = self.attention_params_per_layer + self.active_mlp_params_per_layer
        return self.num_layers * per_layer + self.embedding_params + self.norm_params

    def kv_elements_per_token(self) -> int:
        """K and V elements stored per token over all layers: 2 x layers x KV heads x head_dim."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim_


# ----------------------------------------------------------------------------- SLA


class SLA(_Strict):
    """Latency bounds at a percentile; no bounds means maximise throughput."""

    name: str = "custom"
    description: str = ""
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    percentile: Literal[50, 90, 95, 99] = 95

    @property
    def is_throughput_only(self) -> bool:
        """True when no latency bound is set (the `batch` preset)."""
        return self.ttft_ms is None and self.tpot_ms is None


# ----------------------------------------------------------------------------- workload


# Assumed speculative acceptance per token when neither the workload nor a calibration says.
DEFAULT_ACCEPTANCE = 0.7
# Prompt lookup (n-gram) only hits when the output copies the prompt: on open-ended chat it
# accepts far less than a trained draft (Spec-Bench's PLD row averages well under 2 tokens per
# step), so it gets its own, lower default; raise it for RAG/code-editing workloads.
DEFAULT_NGRAM_ACCEPTANCE = 0.4


class Workload(_Strict):
    """Requests to replay: lengths, arrivals, prefix sharing, speculative acceptance."""

    input_tokens: int = Field(default=1024, ge=1, description="Mean prompt length")
    output_tokens: int = Field(default=256, ge=1, description="Mean generated length")
    length_spread: float = Field(
        default=0.0, ge=0, le=0.9, description="Uniform +- fraction around the mean lengths"
    )
    rate_rps: float | None = Field(
        default=None, gt=0, description="Poisson arrival rate; None = closed loop"
    )
    concurrency: int | None = Field(default=None, ge=1, description="Closed-loop users")
    num_requests: int | None = Field(
        default=None,
        ge=1,
        description="Measured requests (warm-up excluded); None = sized from the load",
    )
    warmup_requests: int | None = Field(
        default=None,
        ge=0,
        description="Requests run before measuring; None = one per user (closed), 10% (open)",
    )
    ramp_s: float | None = Field(
        default=None,
        ge=0,
        description="Closed-loop users start spread over this many seconds; None = one cycle",
    )
    lengths_file: str | None = Field(
        default=None,
        description="CSV/JSONL of empirical (input, output) token lengths sampled with the seed",
    )
    prefix_cache_hit: float = Field(
        default=0.0, ge=0, le=1, description="Fraction of each prompt shared with earlier ones"
    )
    # None: a measured curve of the --gpu profile's calibration, else DEFAULT_ACCEPTANCE.
    acceptance_rate: float | None = Field(
        default=None, ge=0, le=1, description="Per-token acceptance of a draft model's proposals"
    )
    ngram_acceptance_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Per-token acceptance of n-gram (prompt lookup) drafts",
    )
    seed: int = 0

    @model_validator(mode="after")
    def _one_arrival_process(self) -> Workload:
        if self.rate_rps is not None and self.concurrency is not None:
            raise ValueError(
                f"rate_rps={self.rate_rps} and concurrency={self.concurrency} are both set; "
                "choose an open-loop rate or a closed-loop concurrency"
            )
        return self

    @property
    def is_closed_loop(self) -> bool:
        """True when requests come from `users` closed-loop clients (no Poisson rate)."""
        return self.rate_rps is None

    @property
    def users(self) -> int:
        """Closed-loop client count (1 when neither rate nor concurrency is given)."""
        return self.concurrency or 1

    @property
    def measured_requests(self) -> int:
        """Requests that enter the statistics: `num_requests`, else sized from the load."""
        if self.num_requests is not None:
            return self.num_requests
        if self.is_closed_loop:
            return max(MIN_MEASURED_REQUESTS, MEASURED_ROUNDS_PER_USER * self.users)
        return MIN_MEASURED_REQUESTS

    @property
    def warmup_count(self) -> int:
        """Requests run first and left out of the statistics (the ramp-up)."""
        if self.warmup_requests is not None:
            return self.warmup_requests
        if self.is_closed_loop:
            return self.users
        return max(1, round(OPEN_LOOP_WARMUP_FRACTION * self.measured_requests))

    @property
    def total_requests(self) -> int:
        """Requests sent in all: warm-up plus measured."""
        return self.warmup_count + self.measured_requests


# ----------------------------------------------------------------------------- search space


# SearchSpace and EngineConfig have one field per knob of the registry (tuner/knobs): declare a
# knob there, not here. For type checkers they are their bases, whose fields read as Any.
if TYPE_CHECKING:
    SearchSpace = SearchSpaceBase
    EngineConfig = EngineConfigBase
else:
    SearchSpace = build_search_space()
    EngineConfig = build_engine_config()


# ----------------------------------------------------------------------------- samplers

# Chosen by benchmarks/search_efficiency.py: % of the true Pareto hypervolume (mean of 5 seeds,
# 2016-variant enumerable space, llama-3.1-8b / h200-sxm / chat) at 25/50/100/200 trials:
#   tpe 78.1 / 98.0 / 99.5 / 100.0;  nsga2 63.7 / 78.8 / 91.9 / 99.6;
#   random 63.7 / 76.3 / 90.1 / 93.4
DEFAULT_SAMPLER = "tpe"
SAMPLERS: tuple[str, ...] = ("tpe", "nsga2", "random", "grid")


# ----------------------------------------------------------------------------- context


class Context(_Strict):
    """Everything a backend needs besides the variant itself."""

    model: ModelSpec
    gpu: GPUProfile
    sla: SLA
    workload: Workload
    num_gpus: int = Field(default=8, ge=1, description="GPUs available for tensor parallelism")
    draft: ModelSpec | None = Field(default=None, description="Resolved draft model, if any")
