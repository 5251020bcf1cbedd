"""The environment a vLLM variant launches with: knobs an older vLLM reads from environment
variables rather than options. vLLM 0.11-0.18 pick MXFP4 expert kernels in `get_mxfp4_backend`
(vllm 0.18.0 model_executor/layers/quantization/mxfp4.py l.109-169): Marlin's with
VLLM_MXFP4_USE_MARLIN, and on SM100-family GPUs FlashInfer's MXFP4 x MXFP8 ones with
VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8 (the default there has BF16 activations). Later versions
spell Marlin `--moe-backend marlin` (the versions whose row table has it, tuner.export.tables)
and have no option for MXFP8 activations, so the export says so."""

from __future__ import annotations

from tuner.export.tables import ROWS
from tuner.specs import EngineConfig, GPUProfile, MoEKernel, Quantization

__all__ = ["engine_env", "env_notes"]

MARLIN_ENV = "VLLM_MXFP4_USE_MARLIN=1"
# Read on SM100-family GPUs only, so it is harmless elsewhere.
MXFP8_ENV = "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1"


def _spelled(version: str) -> bool:
    return any(r.knob == "moe_kernel" for r in ROWS["vllm"][version])


def _mxfp8_experts(config: EngineConfig) -> bool:
    # The simulator prices MXFP4 experts on FP4-capable NVIDIA GPUs as w4a8 (MXFP8
    # activations, tuner.perf.precision), FlashInfer's TensorRT-LLM MXFP4 x MXFP8 MoE.
    return config.quantization is Quantization.mxfp4 and config.moe_kernel == MoEKernel.auto


def engine_env(config: EngineConfig, version: str) -> list[str]:
    """NAME=value settings the variant's vLLM `version` process needs."""
    if _spelled(version):
        return []
    if config.moe_kernel == MoEKernel.marlin:
        return [MARLIN_ENV]
    return [MXFP8_ENV] if _mxfp8_experts(config) else []


def env_notes(config: EngineConfig, version: str, gpu: GPUProfile | None) -> list[str]:
    """What the expert-kernel settings do, for the export's notes."""
    if config.moe_kernel == MoEKernel.marlin:
        how = "--moe-backend marlin" if _spelled(version) else f"the script exports {MARLIN_ENV}"
        return [
            f"moe-kernel marlin: {how}, so the MXFP4 experts run Marlin's weight-only kernels "
            "instead of triton_kernels (slower prefill on Hopper, faster small-batch decode)."
        ]
    blackwell = gpu is None or (gpu.vendor == "nvidia" and gpu.supports_fp4)
    if not (_mxfp8_experts(config) and blackwell):
        return []
    if not _spelled(version):
        return [
            f"mxfp4 on Blackwell: the script exports {MXFP8_ENV} (FlashInfer's MXFP4 x MXFP8 "
            "experts, as predicted; vLLM's default there has BF16 activations)."
        ]
    return [
        f"mxfp4 on Blackwell: the prediction assumes FlashInfer's MXFP4 x MXFP8 experts; vLLM "
        f"{version} has no option for them (--moe-backend flashinfer_trtllm may pick BF16 "
        "activations, whose prefill is slower)."
    ]
