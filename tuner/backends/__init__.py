"""Backends turn (EngineConfig, Context) into Metrics: `sim` predicts, `torch` and `vllm` measure.

Each backend lives in its own module and is imported on first use, so `import tuner` never
pulls torch or an HTTP client.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tuner.backends.binding import binding_extra, binding_for
from tuner.errors import InputError, echo
from tuner.perf.bands import band_columns
from tuner.perf.capacity import measured_capacity
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.specs import Context, EngineConfig, Metrics

__all__ = [
    "BACKENDS",
    "Backend",
    "capacity_extra",
    "evaluate_capacity",
    "evaluate_request",
    "get_backend",
]


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
        raise InputError(
            f"--model-path {echo(str(path))}: no such folder (expected a Hugging "
            "Face model folder with config.json and *.safetensors)"
        )
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


def capacity_extra(cap: Capacity, percentile: int) -> dict[str, float | int | str | bool | None]:
    """The scalar summary of a capacity search, for `Metrics.extra` (CSV/report columns)."""
    top, op = cap.at_sla, cap.operating
    light = cap.points[0] if cap.points else None  # the lightest load probed, met or not
    return {
        "light_load_tpot_ms": light.tpot_ms.at(percentile) if light else None,
        "load_mode": cap.mode,
        "capacity_load": top.load if top else 0.0,
        "capacity_rps_per_gpu": cap.rps_per_gpu,
        "capacity_tok_s_per_gpu": cap.tok_s_per_gpu,
        "operating_load": op.load if op else None,
        "operating_rps_per_gpu": op.requests_per_s_per_gpu if op else None,
        "operating_tok_s_per_gpu": op.output_tokens_per_s_per_gpu if op else None,
        "capacity_probes": cap.probes,
        "capacity_probe_s": round(cap.probe_s, 3),
        "capacity_budget_exhausted": cap.budget_exhausted,
        **band_columns(top.band if top else None),  # the band at the capacity load
    }


def evaluate_capacity(
    backend: Backend,
    config: EngineConfig,
    ctx: Context,
    *,
    mode: LoadMode = "rate",
    budget: ProbeBudget | None = None,
) -> tuple[Capacity, Metrics]:
    """Capacity of `config` and its Metrics at the capacity load (extra carries the summary).

    A backend with its own `capacity_search` method (the simulator knows its saturated rate;
    a measured backend may keep one engine up across probes) is used as is; any other backend
    is probed through `evaluate` with the workload driven at each load.
    """
    own = getattr(backend, "capacity_search", None)
    if own is not None:
        cap, metrics = own(config, ctx, mode=mode, budget=budget)
    else:
        cap, metrics = measured_capacity(
            lambda at: backend.evaluate(config, at), config, ctx, mode=mode, budget=budget
        )
    if metrics.feasible:
        why = binding_extra(binding_for(config, ctx, cap, metrics))
        metrics = metrics.model_copy(
            update={"extra": {**metrics.extra, **capacity_extra(cap, ctx.sla.percentile), **why}}
        )
    return cap, metrics


def evaluate_request(
    config: EngineConfig,
    ctx: Context,
    *,
    backend: str = "sim",
    model_path: str | None = None,
    compile_step: bool = False,
) -> Metrics:
    """Predict (sim, with its capacity search) or measure (torch, vllm) one valid request."""
    options: dict[str, Any] = {}
    if backend == "sim":
        options["capacity"] = True
    elif model_path is not None:
        options["model_path"] = model_path
    if compile_step:
        if backend != "torch":
            raise InputError(f"--compile applies to --backend torch only (got --backend {backend})")
        options["compile"] = True
    return get_backend(backend, **options).evaluate(config, ctx)
