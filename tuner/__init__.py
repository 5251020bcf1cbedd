"""tuner: find the engine configuration that meets an LLM latency SLA at the lowest cost."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

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


def __getattr__(name: str) -> Any:
    # Lazy, so that `tuner.knobs.register` can add a knob before the models are built from it.
    if name in __all__:
        import tuner.specs

        return getattr(tuner.specs, name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
