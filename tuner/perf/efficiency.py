"""Achievable fractions of datasheet peaks and fixed overheads: every tunable constant, one place.

The roofline model multiplies datasheet peaks (GPUProfile) by these fractions. They are shared
by every GPU, model and workload (no per-row special cases) and were tuned against
`benchmarks/data/public.csv` with `benchmarks/accuracy.py`; calibration can pass a
different `Efficiency` to every function that takes one. With the defaults below,
`python benchmarks/accuracy.py` reports a median absolute error of 5.5% on 21 throughput rows
and 9.3% on 14 single-stream decode rows, and on the 423 modelled closed-loop rows of
`benchmarks/data/silicon_public.csv` 11.1% for mean TPOT (mean TTFT: 66.4%, see the issue-9 note).

Plausibility bounds (checked in `__post_init__`): bandwidth fractions <= 0.95, FLOPS fractions
<= 0.85. Typical published figures: decode GEMV kernels reach 65-85% of HBM peak (gpt-fast
README reports 1397 GB/s of 2039 GB/s on A100 for Llama-2-7B bf16); large cuBLAS GEMMs reach
60-80% of dense tensor peak; weight-only int4/int8 kernels read their weights at 60-80% of the
16-bit kernels' rate (gpt-fast README: 863 GB/s int4, 1069 GB/s int8 vs 1397 GB/s bf16).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.calibration_schema import Calibration
    from tuner.specs import GPUProfile

__all__ = ["DEFAULT_EFFICIENCY", "Efficiency", "efficiency_of", "resolve_efficiency"]

MAX_BANDWIDTH_FRACTION = 0.95
MAX_FLOPS_FRACTION = 0.85


@dataclass(frozen=True)
class Efficiency:
    """Shared efficiency constants of the roofline model (fractions of peak, seconds, bytes)."""

    # Fraction of peak DRAM bandwidth that weight-streaming GEMMs achieve (16-bit and fp8/int8).
    weight_bandwidth_fraction: float = 0.72
    # Fraction of peak DRAM bandwidth paged-attention decode kernels achieve reading the KV cache.
    kv_bandwidth_fraction: float = 0.72
    # Fraction of dense tensor-core peak that large 16-bit GEMMs achieve.
    gemm_flops_fraction: float = 0.70
    # The same for 8-bit (FP8/INT8 w8a8) GEMMs, of the 8-bit peak: per-tensor scaling, and
    # operand loads that do not halve with the datatype, keep them further from their peak.
    low_precision_gemm_flops_fraction: float = 0.55
    # The same for FP4 (NVFP4/MXFP4 block-scaled) GEMMs, of the FP4 peak: one scale per 16/32
    # weights is loaded and applied per MMA block, so they sit further still from their peak.
    fp4_gemm_flops_fraction: float = 0.35
    # FP4 weight-streaming (decode) kernels read their packed weights at this fraction of the
    # 8/16-bit kernels' bandwidth: the swizzled scale-factor tiles are separate loads, and the
    # tiles are too small to keep as many bytes in flight.
    fp4_weight_bandwidth_factor: float = 0.70
    # Fraction of dense tensor-core peak that FlashAttention-style prefill kernels achieve.
    attention_flops_fraction: float = 0.50
    # Weight-only quantized kernels (int4/int8 w/ 16-bit activations, fp8 on Ampere) read their
    # packed weights at this fraction of the 16-bit kernels' bandwidth (unpacking costs issue
    # slots).
    weight_only_bandwidth_factor: float = 0.85
    # Extra compute time of weight-only kernels at large batch (dequantize before the MMA), as a
    # fraction of the 16-bit GEMM time.
    weight_only_dequant_overhead: float = 0.25
    # Fixed host-side cost of one engine step: scheduling, sampling, launch (CUDA graphs), seconds.
    step_overhead_s: float = 0.0006
    # Host-side cost per sequence sampled in a step: sampler, logits processors, detokenizing
    # and queueing the output chunk (vLLM, SGLang and TensorRT-LLM do this in Python/C++ per
    # sequence, so at hundreds of sequences it adds milliseconds to every step).
    seq_step_overhead_s: float = 0.000010
    # Per-layer fixed cost of a step (norms, rotary, small kernels that never reach the roofline).
    layer_overhead_s: float = 0.000010
    # Latency of one tensor-parallel all-reduce round (NCCL/custom all-reduce small-message
    # floor); a TP-way all-reduce takes log2(TP) rounds (see perf.costs).
    allreduce_latency_s: float = 0.000010
    # Fraction of the interconnect bandwidth a ring all-reduce achieves.
    interconnect_fraction: float = 0.70
    # CUDA context, cuBLAS/NCCL workspaces and CUDA graphs held outside the KV pool, bytes.
    runtime_overhead_bytes: float = 1.0 * 1024**3
    # Time from a request's arrival until the scheduler sees it: API server parsing,
    # tokenization, detokenizing and streaming the first chunk (adds to TTFT and E2E, not TPOT).
    request_overhead_s: float = 0.008
    # Per-step cost of an n-gram (prompt-lookup) proposer, seconds (CPU-side search).
    ngram_proposal_s: float = 0.0002
    # Host time to issue one kernel of a step that no captured CUDA graph covers (PyTorch eager:
    # Python module code, op dispatch, the CUDA launch; a captured graph replays every kernel in
    # one launch). The engines' eager steps (tuner.perf.engines) pay it per kernel of every layer
    # (counts: tuner.perf.costs.layer_kernels), serialized with the GPU by the host syncs MoE
    # routing and the scheduler make every step. 20 us is the middle of PyTorch's eager per-op
    # host cost (10-30 us with its Python module code); an engine whose eager steps were measured
    # carries its own figure (`EngineModel.eager_kernel_s`: SGLang's 35 us). `python
    # benchmarks/accuracy.py` with 35 us for every engine instead: MoE TTFT 50.0 -> 42.8%, but
    # the FP4 block 17.0 -> 19.2% (TPOT 5.6 -> 6.8%) and TensorRT-LLM's public throughput rows
    # 9.9 -> 12.6%; no eager step of TensorRT-LLM or vLLM was found measured.
    eager_launch_s: float = 0.000020

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0:
                raise ValueError(f"efficiency constant {f.name}={value} must be >= 0")
        for name in ("weight_bandwidth_fraction", "kv_bandwidth_fraction", "interconnect_fraction"):
            value = getattr(self, name)
            if not 0 < value <= MAX_BANDWIDTH_FRACTION:
                raise ValueError(f"{name}={value} must lie in (0, {MAX_BANDWIDTH_FRACTION}]")
        for name in (
            "gemm_flops_fraction",
            "low_precision_gemm_flops_fraction",
            "fp4_gemm_flops_fraction",
            "attention_flops_fraction",
        ):
            value = getattr(self, name)
            if not 0 < value <= MAX_FLOPS_FRACTION:
                raise ValueError(f"{name}={value} must lie in (0, {MAX_FLOPS_FRACTION}]")
        if not 0 < self.fp4_weight_bandwidth_factor <= 1:
            raise ValueError(
                f"fp4_weight_bandwidth_factor={self.fp4_weight_bandwidth_factor} must lie in (0, 1]"
            )
        if not 0 < self.weight_only_bandwidth_factor <= 1:
            raise ValueError(
                "weight_only_bandwidth_factor="
                f"{self.weight_only_bandwidth_factor} must lie in (0, 1]"
            )


DEFAULT_EFFICIENCY = Efficiency()


def efficiency_of(calibration: Calibration | None) -> Efficiency:
    """The efficiency constants of a device: its calibration's fitted ones over the defaults."""
    if calibration is None:
        return DEFAULT_EFFICIENCY
    return replace(DEFAULT_EFFICIENCY, **calibration.efficiency)


def resolve_efficiency(eff: Efficiency | None, gpu: GPUProfile) -> Efficiency:
    """The constants a prediction uses: an explicit `eff`, else the device's calibrated ones.

    The one place where a calibrated profile (`tuner calibrate`) reaches the simulator: every
    perf function takes `eff=None` and resolves it here against the GPU it models.
    """
    return eff if eff is not None else efficiency_of(gpu.calibration)
