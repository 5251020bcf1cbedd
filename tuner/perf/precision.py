"""What a weight quantization and KV dtype cost on a given GPU: bytes, math rate, dequant.

Hardware-aware: FP8 w8a8 runs on FP8 tensor cores only where they exist (Ada, Hopper,
Blackwell: `GPUProfile.supports_fp8`); elsewhere FP8 is weight-only (Marlin-style dequantize to
16-bit, then 16-bit MMA). INT8 w8a8 uses INT8 tensor cores. INT4/INT8 weight-only shrink the
bytes read but compute at the 16-bit rate after dequantization.

Block-scaled formats: `fp8-block` is w8a8 FP8 with one fp32 scale per 128x128 weight block
(DeepGEMM / CUTLASS block-scaled kernels); `nvfp4` stores e2m1 with one fp8 scale per 16 weights
and runs w4a4 on Blackwell FP4 tensor cores (NVIDIA only); `mxfp4` stores e2m1 with one e8m0
scale per 32 weights: FP4 math on CDNA4, w4a8 (MXFP8 activations, FlashInfer's gpt-oss MoE path)
on Blackwell. Where a GPU lacks FP4 math, vLLM really does emulate both (FP4 Marlin / Triton
dequantize-to-16-bit kernels): weight-only, and the label says "emulated".
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.specs import GPUProfile, KVDtype, Quantization, bytes_per_weight, dense_quantization

__all__ = [
    "ACTIVATION_BYTES",
    "GROUP_SIZE",
    "Precision",
    "DRAFT_QUANTIZATION",
    "FP4_FORMATS",
    "KV_SCALE_BYTES",
    "dense_quantization",
    "kv_bytes_per_vector",
    "precision_for",
]

# Activations, embeddings, norms, LM head and 16-bit KV are stored in bf16/fp16.
ACTIVATION_BYTES = 2.0
# AWQ/GPTQ default group size (AutoAWQ, AutoGPTQ `group_size=128`).
GROUP_SIZE = 128
# Per group: one fp16 scale (2 bytes) plus one packed 4-bit zero point (0.5 byte).
GROUP_METADATA_BYTES = 2.5
# Per-channel schemes (fp8, int8): one fp16/fp32 scale per output channel; we charge 4 bytes per
# row of `hidden_size` weights (rows are at least that long).
CHANNEL_SCALE_BYTES = 4.0

_GROUP_QUANT = {Quantization.int4_awq, Quantization.int4_gptq}
# Block-scaled formats: (elements per scale, bytes per scale).
_BLOCK_SCALES = {
    Quantization.fp8_block: (128 * 128, 4.0),
    Quantization.nvfp4: (16, 1.0),
    Quantization.mxfp4: (32, 1.0),
}
FP4_FORMATS = frozenset({Quantization.nvfp4, Quantization.mxfp4})
_WEIGHT_ONLY = {Quantization.int4_awq, Quantization.int4_gptq, Quantization.int8_wo}
_KV_BYTES = {KVDtype.auto: ACTIVATION_BYTES, KVDtype.fp8: 1.0, KVDtype.int8: 1.0}
# A quantized KV cache keeps one fp32 scale per stored (token, KV head) vector: the reference
# engine does for fp8 and int8, vLLM's int8_per_token_head does; vLLM's fp8 cache uses one
# per-tensor scale instead (4 / head_dim bytes per element less: 3% at head_dim 128).
KV_SCALE_BYTES = 4.0
_KV_SCALED = {KVDtype.fp8, KVDtype.int8}
# The draft model's weights are 16-bit in the simulator and the torch backend alike: the engines
# tuner exports for load the draft checkpoint it names (the original HF model) unquantized.
DRAFT_QUANTIZATION = Quantization.bf16


@dataclass(frozen=True)
class Precision:
    """Cost terms of one quantization on one GPU."""

    bytes_per_param: float  # stored bytes per linear-layer weight, scales/zeros included
    gemm_tflops: float  # dense tensor-core peak the GEMMs run at
    weight_only: bool  # dequantize to 16-bit before the MMA
    label: str  # kernel path, for Metrics.extra


def precision_for(quant: Quantization, gpu: GPUProfile, row_len: int) -> Precision:
    """Bytes per weight and math rate of `quant` on `gpu` (`row_len`: input width of a row)."""
    base = bytes_per_weight(quant)
    if quant in _GROUP_QUANT:
        stored = base + GROUP_METADATA_BYTES / GROUP_SIZE
    elif quant in _BLOCK_SCALES:
        elements, scale_bytes = _BLOCK_SCALES[quant]
        stored = base + scale_bytes / elements
    elif base < ACTIVATION_BYTES:
        stored = base + CHANNEL_SCALE_BYTES / row_len
    else:
        stored = base
    if quant in (Quantization.fp8, Quantization.fp8_block):
        if gpu.supports_fp8:
            return Precision(stored, gpu.fp8_tflops, False, f"{quant.value}-w8a8")
        return Precision(stored, gpu.fp16_tflops, True, f"{quant.value}-weight-only")
    if quant in FP4_FORMATS:
        return _fp4_precision(quant, gpu, stored)
    if quant == Quantization.int8:
        if gpu.int8_tops > 0:
            return Precision(stored, gpu.int8_tops, False, "int8-w8a8")
        return Precision(stored, gpu.fp16_tflops, True, "int8-weight-only")
    if quant in _WEIGHT_ONLY:
        return Precision(stored, gpu.fp16_tflops, True, f"{quant.value}-weight-only")
    return Precision(stored, gpu.fp16_tflops, False, quant.value)


def kv_bytes_per_vector(dtype: KVDtype, head_dim: int) -> float:
    """Bytes of one stored K or V head vector (head_dim elements), its scale included."""
    scale = KV_SCALE_BYTES if dtype in _KV_SCALED else 0.0
    return head_dim * _KV_BYTES[dtype] + scale


def _fp4_precision(quant: Quantization, gpu: GPUProfile, stored: float) -> Precision:
    """NVFP4 / MXFP4: FP4 tensor cores where they exist for the format, else emulated."""
    if quant == Quantization.nvfp4 and gpu.supports_fp4 and gpu.vendor == "nvidia":
        return Precision(stored, gpu.fp4_tflops, False, "nvfp4-w4a4")
    if quant == Quantization.mxfp4 and gpu.supports_fp4:
        if gpu.vendor == "amd":
            return Precision(stored, gpu.fp4_tflops, False, "mxfp4-w4a4")
        return Precision(stored, gpu.fp8_tflops, False, "mxfp4-w4a8")
    return Precision(stored, gpu.fp16_tflops, True, f"{quant.value}-weight-only (emulated)")
