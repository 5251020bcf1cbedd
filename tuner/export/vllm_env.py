"""The environment a vLLM variant launches with: the knobs vLLM reads from environment
variables rather than options (MoE expert kernels: VLLM_MXFP4_USE_MARLIN, read by
`get_mxfp4_backend` in vllm 0.18.0 model_executor/layers/quantization/mxfp4.py)."""

from __future__ import annotations

from tuner.specs import EngineConfig, MoEKernel

__all__ = ["engine_env", "env_notes"]


def engine_env(config: EngineConfig) -> list[str]:
    """NAME=value settings the variant's vLLM process needs."""
    return ["VLLM_MXFP4_USE_MARLIN=1"] if config.moe_kernel == MoEKernel.marlin else []


def env_notes(config: EngineConfig) -> list[str]:
    """What those settings do, for the export's notes."""
    if config.moe_kernel != MoEKernel.marlin:
        return []
    return [
        "moe-kernel marlin: the script exports VLLM_MXFP4_USE_MARLIN=1, so the MXFP4 experts run "
        "Marlin's weight-only kernels instead of triton_kernels (slower prefill on Hopper, "
        "faster small-batch decode)."
    ]
