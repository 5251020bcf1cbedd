"""The rules a knob declares about itself (`needs`, `power_of_two`): they hold whatever the
hardware, so EngineConfig checks them when it is built. Rules that read the model, GPU or
workload are tuner.validity's."""

from __future__ import annotations

from typing import Any

from tuner.knobs.registry import Knob, registered

__all__ = ["config_reason", "needs_reason", "power_of_two_reason"]


def needs_reason(knob: Knob, c: Any) -> str | None:
    """Why a knob set off its default lacks the knob it acts with (None: it does not)."""
    # A knob that only acts with another (speculative tokens need a draft model).
    value = getattr(c, knob.name, knob.default)
    if knob.needs and value != knob.default and not getattr(c, knob.needs, None):
        return f"{knob.name}={value} needs a {knob.needs}"
    return None


def power_of_two_reason(knob: Knob, c: Any) -> str | None:
    """Why a power-of-two knob's value is not one (None: it is)."""
    value = getattr(c, knob.name, knob.default)
    if knob.power_of_two and (value < 1 or value & (value - 1)):
        return f"{knob.name}={value} is not a power of two"
    return None


def config_reason(c: Any) -> str | None:
    """Why a set of knob values is invalid whatever the hardware (EngineConfig runs this)."""
    for knob in registered():
        reason = needs_reason(knob, c) or power_of_two_reason(knob, c)
        if reason:
            return reason
    return None
