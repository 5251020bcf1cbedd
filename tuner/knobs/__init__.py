"""The knob registry (see registry.py); importing it never builds the pydantic models."""

from __future__ import annotations

from tuner.knobs.declared import KVDtype, Quantization
from tuner.knobs.registry import (
    PALETTE,
    Knob,
    color_for,
    get,
    register,
    registered,
    searched,
)

__all__ = [
    "PALETTE",
    "KVDtype",
    "Knob",
    "Quantization",
    "color_for",
    "get",
    "register",
    "registered",
    "searched",
]
