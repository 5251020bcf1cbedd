"""Why a tune's answer is what it is: what each knob is worth around the recommendation."""

from tuner.explain.sensitivity import (
    SENSITIVITY_COLUMNS,
    KnobEffect,
    effect_text,
    knob_sensitivity,
    read_sensitivity_csv,
    top_effects,
    write_sensitivity_csv,
)

__all__ = [
    "SENSITIVITY_COLUMNS",
    "KnobEffect",
    "effect_text",
    "knob_sensitivity",
    "read_sensitivity_csv",
    "top_effects",
    "write_sensitivity_csv",
]
