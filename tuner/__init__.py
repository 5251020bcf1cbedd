"""tuner: find the engine configuration that meets an LLM latency SLA at the lowest cost."""

from __future__ import annotations

__version__ = "0.1.0"

from tuner.specs import (
    SLA,
    Context,
    EngineConfig,
    GPUProfile,
    KVDtype,
    Metrics,
    ModelSpec,
    Quantization,
    SearchSpace,
    Workload,
)

__all__ = [
    "SLA",
    "Context",
    "EngineConfig",
    "GPUProfile",
    "KVDtype",
    "Metrics",
    "ModelSpec",
    "Quantization",
    "SearchSpace",
    "Workload",
    "__version__",
]
