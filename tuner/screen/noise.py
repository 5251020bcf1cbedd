"""Honest noise: a measured variant beats the engine defaults only beyond both capacities' spreads.

A measuring backend that repeats its decisive probes (`tuner.backends.steady_probe`) gives each
capacity the loads that bound it (`Capacity.spread`: every repeat at the low load met the SLA,
every one at the high load missed). In output tokens/s per GPU the capacity then lies between
`tok_s x low / capacity load` and `tok_s x high / capacity load`; a candidate is better than the
defaults when its low end lies above the defaults' high end, not when one pair of probes says so.
"""

from __future__ import annotations

from tuner.screen.variant import ConfirmedVariant

__all__ = ["capacity_interval", "within_noise"]


def capacity_interval(v: ConfirmedVariant) -> tuple[float, float | None] | None:
    """(low, high) output tok/s per GPU bounding `v`'s measured capacity (high None: no load
    above it missed), or None when its measurement carries no spread."""
    cap, measured = v.capacity, v.measured
    top = cap.at_sla if cap is not None else None
    if cap is None or cap.spread is None or top is None or measured is None or top.load <= 0:
        return None
    per_load = measured.capacity_tok_s_per_gpu / top.load
    high = cap.spread.high_load
    return cap.spread.low_load * per_load, None if high is None else high * per_load


def _pct(x: float) -> str:
    return f"{x:+.0%}"


def within_noise(best: ConfirmedVariant | None, baseline: ConfirmedVariant) -> str | None:
    """Why `best` (the highest measured candidate) is no better than the defaults within the
    measured spreads, or None when it is better beyond them, is the defaults, or either side
    has no spread to judge by (nothing to say then)."""
    if best is None or best is baseline or not baseline.meets_sla:
        return None
    pick, base = capacity_interval(best), capacity_interval(baseline)
    if pick is None or base is None or best.measured is None or baseline.measured is None:
        return None
    base_tok = baseline.measured.capacity_tok_s_per_gpu
    gap = best.measured.capacity_tok_s_per_gpu / base_tok - 1.0 if base_tok > 0 else 0.0
    base_high = base[1]
    if base_high is not None and pick[0] > base_high:
        return None
    bound = "unbounded" if base_high is None else f"up to {base_high:,.1f}"
    return (
        f"{best.label} measured {_pct(gap)} ({best.measured.capacity_tok_s_per_gpu:,.1f} vs "
        f"{base_tok:,.1f} output tok/s per GPU), but its capacity could be as low as "
        f"{pick[0]:,.1f} and the defaults' {bound} (repeat-to-repeat spread); the defaults "
        "are kept"
    )
