"""Triton kernels for the engine's hot paths; autotuned on CUDA, fixed configs in the interpreter.

Under TRITON_INTERPRET=1 (CPU) autotuning needs a GPU driver and bf16 is not interpreted
correctly (triton 3.9), so callers there pass fp32/fp16 tensors and the fixed configs below.
"""

from __future__ import annotations

import os

__all__ = ["interpreted"]


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
