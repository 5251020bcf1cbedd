"""What a backend reports for one variant: latency percentiles and throughput (vLLM bench terms)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from pydantic import ConfigDict, Field

from tuner.knobs.models import Strict as _Strict

__all__ = ["PERCENTILES", "Metrics", "Percentiles", "percentiles_ms"]

# The percentiles every latency is summarised at (vLLM bench serve reports the same).
PERCENTILES = (50, 90, 95, 99)


class Percentiles(_Strict):
    """Summary of one latency metric in milliseconds."""

    # A measurement, not an input: a backend may report an unbounded latency.
    model_config = ConfigDict(**{**_Strict.model_config, "allow_inf_nan": True})

    mean: float = 0.0
    p50: float = 0.0
    p90: float = 0.0
    p95: float = 0.0
    p99: float = 0.0

    def at(self, percentile: int) -> float:
        """Value at one of the percentiles 50/90/95/99."""
        return float(getattr(self, f"p{percentile}"))


def percentiles_ms(values_s: ArrayLike) -> Percentiles:
    """Mean and P50/P90/P95/P99 in ms of durations in seconds (numpy's linear interpolation;
    zeros when there are none): the one percentile computation of simulated and measured runs."""
    ms = np.asarray(values_s, dtype=float) * 1e3
    if ms.size == 0:
        return Percentiles()
    p50, p90, p95, p99 = (float(v) for v in np.percentile(ms, PERCENTILES))
    return Percentiles(mean=float(ms.mean()), p50=p50, p90=p90, p95=p95, p99=p99)


class Metrics(_Strict):
    """What a backend reports for one variant under one workload (vLLM bench serve terms)."""

    model_config = ConfigDict(**{**_Strict.model_config, "allow_inf_nan": True})  # as Percentiles

    feasible: bool = True
    reason: str | None = None
    backend: str = "sim"
    ttft_ms: Percentiles = Field(default_factory=Percentiles)
    tpot_ms: Percentiles = Field(default_factory=Percentiles)
    itl_ms: Percentiles = Field(default_factory=Percentiles)
    e2e_ms: Percentiles = Field(default_factory=Percentiles)
    queue_ms: Percentiles = Field(default_factory=Percentiles)
    output_tokens_per_s: float = 0.0
    output_tokens_per_s_per_gpu: float = 0.0
    total_tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    goodput_rps: float = 0.0
    num_requests: int = Field(default=0, description="Measured requests (warm-up excluded)")
    warmup_requests: int = Field(default=0, description="Requests run first, not measured")
    failed_requests: int = 0
    weights_gib: float = 0.0
    kv_capacity_tokens: int = 0
    max_concurrent_seqs: int = 0
    preemptions: int = 0
    kv_utilization: float = 0.0
    extra: dict[str, float | int | str | bool | None] = Field(
        default_factory=dict, description="Backend-specific counters (kernel path, acceptance...)"
    )

    @classmethod
    def infeasible(cls, reason: str, backend: str, **fields: object) -> Metrics:
        """A variant that could not run, with the reason."""
        return cls(feasible=False, reason=reason, backend=backend, **fields)  # type: ignore[arg-type]
