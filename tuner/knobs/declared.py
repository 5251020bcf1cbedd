"""Every engine knob tuner knows, declared once; the order is the order samplers ask for them.

Hardware and model conditions (fp8 only with FP8 math, tensor parallel up to --num-gpus and
dividing the heads...) are rules in tuner.validity; the search samples only the values those
rules allow, so a budget of N trials is N evaluations.

EngineConfig and SearchSpace are built from the registry at import time, which a type checker
cannot see: they inherit EngineKnobs and SpaceKnobs (below, for the checker only), one typed line
per knob, so that a misspelled knob fails `mypy`. tests/test_knob_registry.py fails when a line
there and the registry disagree. A plug-in knob registered at run time has no typed line: read
it with getattr(config, name).
"""

from __future__ import annotations

from enum import Enum

from tuner.knobs.base import IntRange
from tuner.knobs.registry import Knob, register

__all__ = ["Engine", "EngineKnobs", "KVDtype", "MoEKernel", "Quantization", "SpaceKnobs"]


class Quantization(str, Enum):
    """Weight storage (and, for w8a8/fp8, activation math) of an engine variant."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"  # w8a8 fp8 (e4m3) on Ada/Hopper; weight-only fp8 elsewhere
    int8 = "int8"  # w8a8 int8 (SmoothQuant-style)
    int8_wo = "int8-wo"  # w8a16, weight-only per-channel
    int4_awq = "int4-awq"  # w4a16, group 128
    int4_gptq = "int4-gptq"  # w4a16, group 128
    fp8_block = "fp8-block"  # w8a8 fp8, 128x128 weight blocks (DeepSeek-V3, Qwen3-FP8 ship it)
    nvfp4 = "nvfp4"  # w4a4 e2m1, fp8 scale per 16 weights (Blackwell tensor cores)
    mxfp4 = "mxfp4"  # e2m1, e8m0 scale per 32 weights (OCP MX; gpt-oss experts ship it)

    @classmethod
    def _missing_(cls, value: object) -> Quantization | None:
        # Engines and AIConfigurator spell these with underscores (fp8_block, int4_awq).
        if isinstance(value, str) and "_" in value:
            return cls.__members__.get(value) or cls._value2member_map_.get(  # type: ignore[return-value]
                value.replace("_", "-")
            )
        return None


class KVDtype(str, Enum):
    """Storage dtype of the KV cache; `auto` follows the activation dtype (16-bit)."""

    auto = "auto"
    fp8 = "fp8"
    int8 = "int8"


class Engine(str, Enum):
    """The serving engine a variant runs on: its scheduler, overheads and launch files."""

    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"


register(
    Knob(
        "quantization",
        Quantization,
        Quantization.bf16,
        "Weight quantization",
        "--quant",
        "quant",
        footprint=(  # stored bytes per weight, smallest first (see perf.precision)
            Quantization.int4_awq,
            Quantization.int4_gptq,
            Quantization.mxfp4,
            Quantization.nvfp4,
            Quantization.int8_wo,
            Quantization.int8,
            Quantization.fp8,
            Quantization.fp8_block,
            Quantization.bf16,
            Quantization.fp16,
        ),
        noun="weights",
    )
)
register(
    Knob(
        "kv_dtype",
        KVDtype,
        KVDtype.auto,
        "KV-cache dtype",
        "--kv-dtype",
        "kv",
        footprint=(KVDtype.fp8, KVDtype.int8, KVDtype.auto),
        noun="KV",
        words=((KVDtype.auto.value, "16-bit"),),
    )
)
register(
    Knob(
        "tensor_parallel_size",
        int,
        1,
        "Tensor-parallel size",
        "--tp",
        "tp",
        unit="GPUs",
        ge=1,
        space_default=(1,),
        power_of_two=True,
    )
)
register(
    Knob(
        "data_parallel_size",
        int,
        1,
        "Attention data-parallel ranks (MoE: DP-attention; GPUs = TP x DP)",
        "--dp",
        "dp",
        unit="ranks",
        ge=1,
        space_default=(1,),
        power_of_two=True,
    )
)
register(
    Knob(
        "expert_parallel",
        bool,
        False,
        "Expert parallelism: experts split over the TP x DP GPUs, tokens all-to-all",
        "--expert-parallel",
        "ep",
        space_default=(False,),
    )
)
register(
    Knob(
        "max_num_seqs",
        int,
        256,
        "Max concurrent sequences",
        "--max-num-seqs",
        "max seqs",
        ge=1,
        ranged=True,
    )
)
register(
    Knob(
        "max_num_batched_tokens",
        int,
        8192,
        "Token budget per step",
        "--max-batched-tokens",
        "batched tok",
        unit="tokens",
        ge=16,
        ranged=True,
    )
)
register(
    Knob(
        "draft_model",
        str,
        None,
        "Draft model: catalog name, path, ngram, or mtp (the model's own MTP layers)",
        "--draft-model",
        "draft",
        optional=True,
        space_default=(None,),
    )
)
register(
    Knob(
        "num_speculative_tokens",
        int,
        0,
        "Speculative tokens per step",
        "--spec-tokens",
        "spec",
        ge=0,
        le=8,
        space_default=(0,),
        ranged=True,
        needs="draft_model",
    )
)
register(
    Knob(
        "enable_prefix_caching",
        bool,
        True,
        "Prefix caching",
        "--prefix-caching",
        "prefix",
        space_default=(True,),
    )
)
register(
    Knob(
        "enable_chunked_prefill",
        bool,
        True,
        "Chunked prefill",
        "--chunked-prefill",
        "chunked",
        searched=False,
    )
)
register(
    Knob(
        "gpu_memory_utilization",
        float,
        0.9,
        "Fraction of GPU memory the engine may use",
        "--gpu-memory-utilization",
        "mem util",
        gt=0.0,
        le=1.0,
        searched=False,
    )
)
register(
    Knob(
        "block_size",
        int,
        16,
        "KV-cache block size",
        "--block-size",
        "block",
        unit="tokens",
        ge=1,
        searched=False,
    )
)

register(
    Knob(
        "engine",
        Engine,
        Engine.vllm,
        "Serving engine: whose scheduling and overheads are predicted, whose launch files lead",
        "--engine",
        "engine",
        # A space that does not name engines keeps vLLM; the shipped spaces list all three, so
        # `tuner tune` searches every engine unless pinned (`--engine sglang`). Each engine then
        # gets the best front variant of its own engine, and the recommendation names one.
        space_default=(Engine.vllm,),
    )
)


class MoEKernel(str, Enum):
    """Which kernels run the routed experts: the engine's default for the format on this GPU,
    or Marlin's weight-only kernels (vLLM's VLLM_MXFP4_USE_MARLIN for MXFP4 experts)."""

    auto = "auto"
    marlin = "marlin"


register(
    Knob(
        "moe_kernel",
        MoEKernel,
        MoEKernel.auto,
        "MoE expert kernels: the engine's default, or Marlin's weight-only ones (vLLM MXFP4)",
        "--moe-kernel",
        "moe kernel",
        # Searched only where a space lists marlin: on Hopper it trades prefill speed (Marlin's
        # mma.sync reaches a quarter of the wgmma peak) for decode speed at small batches.
        space_default=(MoEKernel.auto,),
    )
)


class EngineKnobs:
    """The value of each declared knob in one engine variant (EngineConfig's fields)."""

    quantization: Quantization
    kv_dtype: KVDtype
    tensor_parallel_size: int
    data_parallel_size: int
    expert_parallel: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    draft_model: str | None
    num_speculative_tokens: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    gpu_memory_utilization: float
    block_size: int
    engine: Engine
    moe_kernel: MoEKernel


class SpaceKnobs:
    """The choices of each declared searched knob (SearchSpace's fields)."""

    quantization: list[Quantization]
    kv_dtype: list[KVDtype]
    tensor_parallel_size: list[int]
    data_parallel_size: list[int]
    expert_parallel: list[bool]
    max_num_seqs: list[int] | IntRange
    max_num_batched_tokens: list[int] | IntRange
    draft_model: list[str | None]
    num_speculative_tokens: list[int] | IntRange
    enable_prefix_caching: list[bool]
    engine: list[Engine]
    moe_kernel: list[MoEKernel]
