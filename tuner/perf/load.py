"""A capacity search's vocabulary: load modes, probed points, the result and its budget.

Kept apart from the search (`tuner.perf.capacity`) so trial records, reports and backends read
a Capacity without importing the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tuner.perf.bands import Band
from tuner.sla import SLA_HEADROOM
from tuner.specs import Percentiles, Workload

__all__ = [
    "FIRST_PROBE_RPS",
    "LADDER_FRACTIONS",
    "Capacity",
    "CapacitySpread",
    "format_load",
    "load_unit",
    "probe_at",
    "LoadMode",
    "LoadPoint",
    "ProbeBudget",
    "steady_sized",
    "workload_at",
]

LoadMode = Literal["rate", "users"]

# Where a search without a saturation estimate starts (req/s per replica).
FIRST_PROBE_RPS = 0.5
# Loads (fractions of the capacity load) the ladder should also hold, so the latency-throughput
# curve has points between the lightest load and capacity; probed only where no probe is near.
LADDER_FRACTIONS = (0.25, 0.5, 0.75)


class LoadPoint(BaseModel):
    """One probed load and what the variant did there (latencies in ms, per-GPU throughput)."""

    model_config = ConfigDict(extra="forbid")

    load: float = Field(description="Offered load per replica: req/s (rate) or users")
    requests_per_s_per_gpu: float
    output_tokens_per_s_per_gpu: float = Field(
        description="Steady-state served output tok/s per GPU: req/s per GPU x mean output tokens"
    )
    window_output_tokens_per_s_per_gpu: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Diagnostic: output tokens over the measured window's span, per GPU; it "
        "rewards a short tail of the window, not capacity, so nothing ranks by it",
    )
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    meets_sla: bool
    meets_headroom: bool
    band: Band | None = Field(default=None, description="The prediction's error band here")
    meets_band: bool = Field(default=True, description="Latencies x (1 + band) meet the SLA")


class CapacitySpread(BaseModel):
    """How sure a measured capacity is: the loads that bound it after repeating its decisive
    probes (every repeat at `low_load` met the SLA, every one at `high_load` missed it)."""

    model_config = ConfigDict(extra="forbid")

    low_load: float = Field(description="Highest load whose every repeat met the SLA (0: none)")
    high_load: float | None = Field(
        description="Lowest load above it whose every repeat missed (None: none missed)"
    )
    repeats: int = Field(description="Probes measured again to decide the verdicts")

    def rel(self, capacity_load: float) -> float | None:
        """(high - low) / capacity: the capacity's relative spread (None: no upper bound)."""
        if self.high_load is None or capacity_load <= 0:
            return None
        return (self.high_load - self.low_load) / capacity_load


class Capacity(BaseModel):
    """A variant's capacity at the SLA, its operating point with headroom, and the probed ladder."""

    model_config = ConfigDict(extra="forbid")

    mode: LoadMode
    tensor_parallel_size: int = 1  # GPUs of one replica (TP x DP)
    headroom: float = SLA_HEADROOM
    points: list[LoadPoint] = Field(default_factory=list, description="Every probe, by load")
    probes: int = 0
    probe_s: float = 0.0
    budget_exhausted: bool = False
    saturated_load: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The load past which the queue grows without bound (simulator only)",
    )
    spread: CapacitySpread | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Measured searches: the loads bounding the capacity after repeats",
    )

    def _best(self, ok: Callable[[LoadPoint], bool]) -> LoadPoint | None:
        passing = [p for p in self.points if ok(p)]
        return max(passing, key=lambda p: p.load) if passing else None

    @property
    def at_sla(self) -> LoadPoint | None:
        """The highest probed load meeting the SLA (None: not even the lightest load does)."""
        return self._best(lambda p: p.meets_sla)

    @property
    def operating(self) -> LoadPoint | None:
        """The highest probed load meeting the SLA with the headroom margin and the error band."""
        return self._best(lambda p: p.meets_headroom and p.meets_band)

    @property
    def rps_per_gpu(self) -> float:
        """Capacity in requests/s per GPU (0 when no load meets the SLA)."""
        p = self.at_sla
        return p.requests_per_s_per_gpu if p else 0.0

    @property
    def tok_s_per_gpu(self) -> float:
        """Goodput at the SLA: output tokens/s per GPU at the capacity load."""
        p = self.at_sla
        return p.output_tokens_per_s_per_gpu if p else 0.0

    @property
    def ladder(self) -> list[LoadPoint]:
        """The SLA-meeting probes, lightest load first: the variant's latency-throughput curve."""
        return sorted((p for p in self.points if p.meets_sla), key=lambda p: p.load)


class ProbeBudget(BaseModel):
    """How much a capacity search may spend: probes, seconds, and the bisection tolerance."""

    model_config = ConfigDict(extra="forbid")

    max_probes: int = Field(default=14, ge=2)
    max_seconds: float | None = Field(default=None, gt=0)
    rel_tol: float = Field(default=0.03, gt=0, lt=1)

    @classmethod
    def measured(cls) -> ProbeBudget:
        """The default of a measured (torch, vllm) search: each probe runs real load, so it is
        bounded in time too, and a tune on a slow device (a CPU) still finishes trials.

        A probe lasts 40 service times (tuner.backends.steady_probe), about 70 s for SmolLM2-135M
        on vLLM-CPU: 180 s held two probes, and the search ended below the capacity (vLLM's
        defaults "measured" 2 req/s, no rate having missed). 600 s brackets and bisects."""
        return cls(max_probes=8, max_seconds=600.0)


def workload_at(wl: Workload, mode: LoadMode, load: float) -> Workload:
    """`wl` driven at `load`: a Poisson rate (req/s) or a number of closed-loop users."""
    if mode == "rate":
        return wl.model_copy(update={"rate_rps": load, "concurrency": None})
    return wl.model_copy(update={"rate_rps": None, "concurrency": max(1, round(load))})


def steady_sized(wl: Workload, in_flight: float) -> Workload:
    """`wl` with an open-loop probe sized for steady state, unless the user fixed the counts.

    By Little's law about `in_flight` requests are in the engine at once; the batch takes that
    many arrivals to fill, so they are the warm-up, and at least as many are measured. A flat
    200 requests at a high rate measure mostly the ramp (at 36 req/s on llama-3.1-8b/h200-sxm,
    TPOT P95 10 ms with 200 requests, 21 ms with 2000). Measuring two fillings doubled the
    default tune's time (15 s to 32 s here), so it is one.
    """
    if wl.num_requests is not None or wl.warmup_requests is not None or wl.protocol != "steady":
        return wl  # a benchmark client's protocol sends what it is told and counts it all
    fill = math.ceil(in_flight)
    return wl.model_copy(
        update={
            "warmup_requests": max(wl.warmup_count, fill),
            "num_requests": max(wl.measured_requests, fill),
        }
    )


def load_unit(mode: str) -> str:
    """How a load of this mode is counted."""
    return "req/s" if mode == "rate" else "users"


def format_load(load: float, mode: str) -> str:
    """A load as printed: req/s with two decimals, users as a whole number."""
    return f"{load:,.2f}" if mode == "rate" else f"{load:,.0f}"


def probe_at(cap: Capacity | None, load: float) -> LoadPoint | None:
    """The capacity probe of `cap` at exactly `load` (a frontier row's), if any."""
    points = cap.points if cap else []
    return next((p for p in points if p.load == load), None)
