"""Optional torch.compile of the engine step (Inductor; on CPU it needs a C++ compiler).

Inductor options (measured on this CPU, SmolLM2-135M, 1 thread):
- `freezing`: weights become graph constants, the precondition for Inductor's C++ GEMM template
  (AMX/AVX-512 micro-kernels) and for its own oneDNN prepacking of 16-bit linears;
- `max_autotune` with the CPP and ATEN GEMM backends: every matmul shape is benchmarked once, and
  the C++ int8 weight-only template beat `aten._weight_int8pack_mm` (e.g. 22 vs 16 GB/s on the
  576x49152 LM head at M=1; 12 vs 4.6 GB/s at M=8).
Compilation happens on the first calls of each new shape class (prefill, batch-1 decode, then one
dynamic-shape graph); its cost is paid at warm-up and should be timed separately.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["INDUCTOR_OPTIONS", "compile_available", "compile_forward"]

INDUCTOR_OPTIONS: dict[str, Any] = {
    "freezing": True,
    "max_autotune": True,
    "max_autotune_gemm_backends": "CPP,ATEN",
}


def compile_available() -> tuple[bool, str]:
    """(True, "") if torch.compile with Inductor can run here, else (False, the reason)."""
    try:
        from torch._inductor import cpp_builder

        cpp_builder.get_cpp_compiler()
    except Exception as exc:  # noqa: BLE001 - any failure means "no compiler here"
        return False, f"torch.compile unavailable: {type(exc).__name__}: {exc}"
    return True, ""


def compile_forward(model: torch.nn.Module) -> Callable[..., Any]:
    """The model's forward compiled by Inductor; call it under torch.inference_mode().

    Freezing applies only without autograd, so the engine runs compiled steps in inference mode.
    """
    # One compiled forward per model, so every Engine over it reuses the compiled graphs.
    compiled = model.__dict__.get("_compiled_forward")
    if compiled is None:
        compiled = torch.compile(model.forward, dynamic=None, options=INDUCTOR_OPTIONS)
        model.__dict__["_compiled_forward"] = compiled
    return compiled
