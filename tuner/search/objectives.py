"""What the search optimises and constrains: objectives at the SLA percentile, SLA/memory limits.

Objectives: minimise TTFT and TPOT at the SLA percentile, maximise output tokens/s per GPU;
an SLA without latency bounds (`batch`) optimises throughput alone. Constraints follow Optuna's
convention (<= 0 is feasible) and are relative (value / bound - 1) so TTFT and TPOT misses are
comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.sla import Violation, sla_violations
from tuner.specs import SLA, Metrics

__all__ = [
    "CAPACITY_OBJECTIVES",
    "Objective",
    "Violation",
    "constraint_names",
    "constraint_values",
    "objectives_for",
    "sla_violations",
]


@dataclass(frozen=True)
class Objective:
    """One optimisation axis: which Metrics number, its direction and how to label it."""

    name: str  # short key, used as CSV column and Optuna objective name
    label: str  # axis title with unit
    maximize: bool
    percentile: int | None = None  # latency objectives are read at the SLA percentile

    def value(self, metrics: Metrics) -> float:
        """This objective's number from a backend's Metrics."""
        if self.name == "ttft_ms":
            return metrics.ttft_ms.at(self.percentile or 50)
        if self.name == "tpot_ms":
            return metrics.tpot_ms.at(self.percentile or 50)
        if self.name in metrics.extra or self.name in CAPACITY_OBJECTIVES:
            value = metrics.extra.get(self.name)
            # A variant that could not run has no capacity search; its constraints reject it.
            return float(value) if isinstance(value, int | float) else 0.0
        return metrics.output_tokens_per_s_per_gpu


# Capacity mode's objectives, read from Metrics.extra (tuner.backends.capacity_extra).
CAPACITY_OBJECTIVES = ("light_load_tpot_ms", "capacity_tok_s_per_gpu")


def objectives_for(sla: SLA, *, capacity: bool = False) -> list[Objective]:
    """The objectives of a study under `sla` (throughput only when no latency bound is set).

    Capacity mode: the two ends of a variant's latency-throughput curve, its goodput per GPU at
    the SLA (maximised) and its TPOT at the SLA percentile under the lightest load (minimised).
    """
    if capacity:
        goodput = Objective(
            "capacity_tok_s_per_gpu", "goodput at the SLA (output tok/s per GPU)", maximize=True
        )
        if sla.is_throughput_only:
            return [goodput]
        light = Objective(
            "light_load_tpot_ms",
            f"TPOT P{sla.percentile} at light load (ms)",
            maximize=False,
            percentile=sla.percentile,
        )
        return [light, goodput]
    tput = Objective("tput_per_gpu", "output tokens/s per GPU", maximize=True)
    if sla.is_throughput_only:
        return [tput]
    p = sla.percentile
    return [
        Objective("ttft_ms", f"TTFT P{p} (ms)", maximize=False, percentile=p),
        Objective("tpot_ms", f"TPOT P{p} (ms)", maximize=False, percentile=p),
        tput,
    ]


# Constraint value of a variant the backend could not run (out of memory, crashed): any positive
# number marks it infeasible; 1.0 reads as "missed by 100%" next to the relative SLA misses.
RUN_FAILURE_VIOLATION = 1.0


def constraint_names(sla: SLA) -> list[str]:
    """Names of the constraints `constraint_values` returns, in the same order."""
    names = ["runs"]
    if sla.ttft_ms is not None:
        names.append("ttft")
    if sla.tpot_ms is not None:
        names.append("tpot")
    return names


def constraint_values(metrics: Metrics, sla: SLA) -> list[float]:
    """Optuna constraints (<= 0 feasible): ran-and-fit first, then one per SLA bound."""
    ran = 0.0 if metrics.feasible else RUN_FAILURE_VIOLATION
    if not metrics.feasible:
        return [ran] + [RUN_FAILURE_VIOLATION] * len(sla_violations(metrics, sla))
    return [ran] + [v.relative for v in sla_violations(metrics, sla)]
