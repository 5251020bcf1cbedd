"""The SLA check, stated once: each bounded latency at the SLA percentile against its bound.

Every caller asks `sla_violations` (or `meets_sla` on top of it): the capacity search, the
error-band margin, the optimizer's constraints, the trial table and `tuner bench`'s summary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tuner.metrics import Metrics
from tuner.specs import SLA

__all__ = [
    "SLA_HEADROOM",
    "UNSTABLE_QUEUE",
    "Violation",
    "bounds_text",
    "meets_sla",
    "requests_meet_sla",
    "sla_violations",
    "tightened",
]

# A recommendation keeps this margin below each SLA bound (the capacity operating point and the
# fixed-load pick alike), so run-to-run noise and simulator error (benchmarks/accuracy.py) do not
# push the deployed load over the SLA.
SLA_HEADROOM = 0.10
# Metrics.extra flag of a measured load whose waiting time was still growing when it ended.
UNSTABLE_QUEUE = "queue_growing"


@dataclass(frozen=True)
class Violation:
    """How far one latency number is from its SLA bound (positive excess = miss)."""

    metric: str  # "TTFT" or "TPOT"
    value_ms: float
    bound_ms: float

    @property
    def met(self) -> bool:
        """The latency is within its bound."""
        return self.value_ms <= self.bound_ms

    @property
    def relative(self) -> float:
        """value / bound - 1: <= 0 meets the bound, 0.25 misses it by 25%."""
        return self.value_ms / self.bound_ms - 1.0

    def describe(self, percentile: int) -> str:
        """'TTFT P95 812 ms > 500 ms (+62%)' style text."""
        sign = "<=" if self.met else ">"
        return (
            f"{self.metric} P{percentile} {self.value_ms:.1f} ms {sign} {self.bound_ms:g} ms "
            f"({self.relative:+.0%})"
        )


def sla_violations(
    metrics: Metrics, sla: SLA, *, ttft_margin: float = 0.0, tpot_margin: float = 0.0
) -> list[Violation]:
    """Each bounded latency at the SLA percentile (times 1 + its margin) against its bound."""
    p = sla.percentile
    out = []
    if sla.ttft_ms is not None:
        out.append(Violation("TTFT", metrics.ttft_ms.at(p) * (1 + ttft_margin), sla.ttft_ms))
    if sla.tpot_ms is not None:
        out.append(Violation("TPOT", metrics.tpot_ms.at(p) * (1 + tpot_margin), sla.tpot_ms))
    return out


def requests_meet_sla(ttft_s: ArrayLike, tpot_s: ArrayLike, sla: SLA | None) -> NDArray[np.bool_]:
    """Per request (seconds; TPOT 0 for a one-token output), whether it meets every bound: the
    goodput test of simulated and measured runs alike."""
    ttft, tpot = np.asarray(ttft_s, dtype=float), np.asarray(tpot_s, dtype=float)
    ok = np.ones(ttft.shape, dtype=bool)
    if sla is not None and sla.ttft_ms is not None:
        ok &= ttft * 1e3 <= sla.ttft_ms
    if sla is not None and sla.tpot_ms is not None:
        ok &= tpot * 1e3 <= sla.tpot_ms
    return ok


def meets_sla(
    metrics: Metrics, sla: SLA, *, ttft_margin: float = 0.0, tpot_margin: float = 0.0
) -> bool:
    """Whether feasible `metrics` meet every bound of `sla` (latencies x (1 + margin))."""
    checks = sla_violations(metrics, sla, ttft_margin=ttft_margin, tpot_margin=tpot_margin)
    # A queue still growing at the end of a measured window has no steady state: its latencies
    # only look good because the window ended (a measuring backend sets the flag).
    stable = not metrics.extra.get(UNSTABLE_QUEUE)
    return metrics.feasible and stable and all(v.met for v in checks)


def tightened(sla: SLA, headroom: float) -> SLA:
    """`sla` with every bound scaled by (1 - headroom)."""
    scale = 1.0 - headroom
    return sla.model_copy(
        update={
            "ttft_ms": None if sla.ttft_ms is None else sla.ttft_ms * scale,
            "tpot_ms": None if sla.tpot_ms is None else sla.tpot_ms * scale,
        }
    )


def bounds_text(sla: SLA, none: str = "no latency bound") -> str:
    """The SLA's bounds as "TTFT P95 <= 500 ms, TPOT P95 <= 50 ms" (`none` when it has none)."""
    parts = [
        f"{name} P{sla.percentile} <= {bound:g} ms"
        for name, bound in (("TTFT", sla.ttft_ms), ("TPOT", sla.tpot_ms))
        if bound is not None
    ]
    return ", ".join(parts) or none
