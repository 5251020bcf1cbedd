"""How many identical pure-decode steps a run may sum before something changes: the next arrival
becomes visible, or the decoding sequences outgrow the free KV blocks."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["EPS", "steps_until", "steps_within_kv"]

# Progress-counter tolerance (G is a float when speculation advances fractional tokens per step).
EPS = 1e-9


def steps_until(wait_s: float, d0: float, slope: float) -> int:
    """Fewest steps whose durations d0, d0+slope, ... add up to at least `wait_s`."""
    if wait_s <= 0:
        return 1
    if slope <= 0:
        return math.ceil(wait_s / d0 - EPS)
    # m d0 + slope m (m - 1) / 2 >= wait  ->  (slope/2) m^2 + (d0 - slope/2) m - wait >= 0
    a, b = slope / 2.0, d0 - slope / 2.0
    root = (-b + math.sqrt(b * b + 4 * a * wait_s)) / (2 * a)
    return max(1, math.ceil(root - EPS))


def steps_within_kv(
    decoding: dict[int, float],
    g: float,
    tps: float,
    queries: int,
    bs: int,
    capacity: int,
    limit: int,
) -> int:
    """Largest m <= limit such that the first m steps all find their KV blocks (at least 1)."""
    bases = np.fromiter(decoding.values(), dtype=np.float64, count=len(decoding))

    def fits(step: int) -> bool:
        ctx = bases + (g + step * tps + queries)
        return int(np.ceil(ctx / bs - EPS).sum()) <= capacity

    lo, hi = 1, limit  # step index 0 fits (checked by the caller); find the last fitting index
    if fits(hi - 1):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid - 1):
            lo = mid
        else:
            hi = mid
    return lo
