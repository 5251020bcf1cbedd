"""Backends turn (EngineConfig, Context) into Metrics: `sim` predicts, `torch` and `vllm` measure.

Each backend lives in its own module and is imported on first use, so `import tuner` never
pulls torch or an HTTP client.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tuner.errors import InputError, echo
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


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte
        return False


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name with backend-specific keyword options."""
    if name not in BACKENDS:
        raise InputError(f"unknown backend {echo(name)}; allowed: {', '.join(BACKENDS)}")
    path = options.get("model_path")
    if path is not None and not _is_dir(Path(path)):
        # Caught here, not per trial: a search of variants that all fail would exit 0 or 3.
        raise InputError(f"--model-path {echo(str(path))}: no such folder (expected a Hugging "
                         "Face model folder with config.json and *.safetensors)")  # fmt: skip
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
