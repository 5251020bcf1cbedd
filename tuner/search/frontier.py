"""The latency-throughput frontier across load, and the capacity recommendation.

In capacity mode every evaluated variant carries a ladder of loads up to its capacity (see
tuner.perf.capacity). The frontier is over (variant, load) points: per-user output speed (TPOT
at the SLA percentile, lower is better) against output tokens/s per GPU (higher is better), SLA-
meeting points only. Points whose metrics agree within `OUTCOME_TOLERANCE` are one outcome: they
collapse into one row that names the knobs that did not matter there and how many variants it
stands for, so no two rows of the frontier have equal metrics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from tuner.search.trials import KNOBS, TrialRecord
from tuner.sla import SLA_HEADROOM
from tuner.specs import SLA

__all__ = [
    "CAPACITY_RULE",
    "OUTCOME_TOLERANCE",
    "FrontPoint",
    "capacity_frontier",
    "frontier_history",
    "ranked_by_capacity",
    "recommend_capacity",
]

# Two outcomes are the same when TTFT, TPOT and tokens/s per GPU each differ by at most this
# fraction: well inside the simulator's error (benchmarks/accuracy.py) and run-to-run noise.
OUTCOME_TOLERANCE = 0.01
CAPACITY_RULE = (
    "Highest capacity per GPU (served requests/s per GPU at the highest load that meets every SLA "
    f"bound with {SLA_HEADROOM:.0%} headroom, i.e. each bounded latency at the SLA "
    f"percentile <= {1 - SLA_HEADROOM:.0%} of its bound, and still <= its bound when "
    "inflated by the prediction's error band: predicted x (1 + band) <= bound, tuner.perf.bands); "
    "if no variant has that headroom, "
    "the highest capacity at the SLA itself, flagged. Output tokens/s are steady-state: served "
    "req/s x mean output tokens. Ties go to more output tokens/s, lower TPOT, then fewer GPUs."
)


class FrontPoint(BaseModel):
    """One frontier row: a variant at one load, and the variants with the same outcome."""

    trial: int
    load: float = Field(description="Offered load per replica: req/s (rate) or users")
    mode: str
    requests_per_s_per_gpu: float
    output_tokens_per_s_per_gpu: float
    ttft_ms: float  # at the SLA percentile
    tpot_ms: float  # at the SLA percentile
    is_capacity: bool = Field(description="This load is the variant's capacity at the SLA")
    variants: list[int] = Field(description="Trials with this outcome (the row stands for them)")
    did_not_matter: dict[str, list[Any]] = Field(
        default_factory=dict, description="Knobs whose values differ within the group"
    )

    @property
    def tokens_per_s_per_user(self) -> float:
        """Per-user output speed at the SLA percentile (1000 / TPOT)."""
        return 1e3 / self.tpot_ms if self.tpot_ms > 0 else float("inf")


def _points(records: list[TrialRecord], sla: SLA) -> list[FrontPoint]:
    p = sla.percentile
    out = []
    for r in records:
        if r.capacity is None or r.duplicate_of is not None or not r.evaluated:
            continue
        top = r.capacity.at_sla
        for q in r.capacity.ladder:
            out.append(
                FrontPoint(
                    trial=r.number,
                    load=q.load,
                    mode=r.capacity.mode,
                    requests_per_s_per_gpu=q.requests_per_s_per_gpu,
                    output_tokens_per_s_per_gpu=q.output_tokens_per_s_per_gpu,
                    ttft_ms=q.ttft_ms.at(p),
                    tpot_ms=q.tpot_ms.at(p),
                    is_capacity=top is not None and q.load == top.load,
                    variants=[r.number],
                )
            )
    return out


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12)


def _same(a: FrontPoint, b: FrontPoint, tol: float) -> bool:
    return (
        _close(a.output_tokens_per_s_per_gpu, b.output_tokens_per_s_per_gpu, tol)
        and _close(a.tpot_ms, b.tpot_ms, tol)
        and _close(a.ttft_ms, b.ttft_ms, tol)
    )


def _knob_values(records: dict[int, TrialRecord], trials: list[int]) -> dict[str, list[Any]]:
    values: dict[str, list[Any]] = {}
    for knob in KNOBS:
        seen: list[Any] = []
        for n in trials:
            cfg = records[n].config
            v = getattr(cfg, knob, None) if cfg is not None else None
            v = getattr(v, "value", v)
            if v not in seen:
                seen.append(v)
        if len(seen) > 1:
            values[knob] = sorted(seen, key=str)
    return values


def _undominated(points: list[FrontPoint]) -> list[FrontPoint]:
    if not points:
        return []
    arr = np.array([(q.tpot_ms, -q.output_tokens_per_s_per_gpu) for q in points])
    keep = []
    for i in range(len(arr)):
        le = np.all(arr <= arr[i], axis=1)
        lt = np.any(arr < arr[i], axis=1)
        if not np.any(le & lt):
            keep.append(points[i])
    return keep


def capacity_frontier(
    records: list[TrialRecord], sla: SLA, tol: float = OUTCOME_TOLERANCE
) -> list[FrontPoint]:
    """Distinct non-dominated (variant, load) points, highest tokens/s per GPU first."""
    by_number = {r.number: r for r in records}
    front = _undominated(_points(records, sla))
    # Representative of a group: fewest GPUs, then the earliest trial.
    front.sort(
        key=lambda q: (
            by_number[q.trial].config.tensor_parallel_size  # type: ignore[union-attr]
            if by_number[q.trial].config
            else 1,
            q.trial,
            q.load,
        )
    )
    rows: list[FrontPoint] = []
    for q in front:
        match = next((row for row in rows if _same(row, q, tol)), None)
        if match is None:
            rows.append(q.model_copy(update={"variants": list(q.variants)}))
        elif q.trial not in match.variants:
            match.variants.append(q.trial)
    for row in rows:
        row.variants = sorted(row.variants)
        row.did_not_matter = _knob_values(by_number, row.variants)
    rows.sort(key=lambda q: (-q.output_tokens_per_s_per_gpu, q.tpot_ms, q.trial))
    return rows


def frontier_history(
    records: list[TrialRecord], sla: SLA, reference: list[float]
) -> tuple[float, list[float]]:
    """Hypervolume of the frontier (TPOT min, tok/s/GPU max) and after each trial, in order."""
    from tuner.search.pareto import hypervolume_history

    ordered = sorted(records, key=lambda r: r.number)
    pts, owner = [], []
    for q in _points(ordered, sla):
        pts.append((q.tpot_ms, -q.output_tokens_per_s_per_gpu))
        owner.append(q.trial)
    history = hypervolume_history(np.array(pts).reshape(-1, 2), reference) if pts else []
    per_trial, current, i = [], 0.0, 0
    for r in ordered:
        while i < len(owner) and owner[i] == r.number:
            current = history[i]
            i += 1
        per_trial.append(current)
    return (per_trial[-1] if per_trial else 0.0), per_trial


def ranked_by_capacity(records: list[TrialRecord], sla: SLA) -> list[TrialRecord]:
    """Variants with a capacity, best first by the rule (those with headroom before the rest)."""

    def rank(r: TrialRecord) -> tuple[bool, float, float, float, int, int]:
        assert r.capacity is not None and r.config is not None
        point = r.capacity.operating or r.capacity.at_sla
        assert point is not None
        return (
            r.capacity.operating is None,
            -point.requests_per_s_per_gpu,
            -point.output_tokens_per_s_per_gpu,
            point.tpot_ms.at(sla.percentile),
            r.config.tensor_parallel_size,
            r.number,
        )

    candidates = [
        r
        for r in records
        if r.capacity is not None
        and r.capacity.at_sla is not None
        and r.duplicate_of is None
        and r.config is not None
    ]
    return sorted(candidates, key=rank)


def recommend_capacity(records: list[TrialRecord], sla: SLA) -> tuple[int | None, bool]:
    """The trial with the highest capacity per GPU at its headroom operating point (see rule)."""
    ranked = ranked_by_capacity(records, sla)
    if not ranked:
        return None, False
    best = ranked[0]
    return best.number, best.capacity is not None and best.capacity.operating is not None
