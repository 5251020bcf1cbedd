"""Backends turn (EngineConfig, Context) into Metrics: `sim` predicts, `torch` and `vllm` measure.

Each backend lives in its own module and is imported on first use, so `import tuner` never
pulls torch or an HTTP client.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

from tuner.errors import InputError
from tuner.specs import Context, EngineConfig, Metrics

__all__ = ["BACKENDS", "Backend", "get_backend"]


@runtime_checkable
class Backend(Protocol):
    """Evaluates one engine variant; never raises into the search loop (infeasible instead)."""

    name: str

    def evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """Predict or measure `config` under `ctx.workload`."""
        ...


# name -> "module:factory"; the factory takes keyword options and returns a Backend.
BACKENDS: dict[str, str] = {
    "sim": "tuner.backends.sim:SimBackend",
    "torch": "tuner.backends.torch:TorchBackend",
    "vllm": "tuner.backends.vllm:VLLMBackend",
}


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name with backend-specific keyword options."""
    if name not in BACKENDS:
        raise InputError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    module_name, factory = BACKENDS[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(
            f"backend {name!r} needs a package that is not installed ({exc.name}); "
            "install the extras: pip install 'tuner[engine,real]'"
        ) from exc
    backend: Backend = getattr(module, factory)(**options)
    return backend
