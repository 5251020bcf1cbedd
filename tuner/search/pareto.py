"""Pareto analysis: dominance, hypervolume, knee point and the recommendation rule.

Array functions take points in *minimisation* form (negate maximised objectives first with
`to_minimization`); they are pure and work for any number of objectives.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from tuner.search.frontier import (
    CAPACITY_RULE,
    FrontPoint,
    capacity_frontier,
    frontier_history,
    recommend_capacity,
)
from tuner.search.objectives import Objective, objectives_for, sla_violations
from tuner.search.trials import TrialRecord
from tuner.sla import SLA_HEADROOM, bounds_text, meets_sla, tightened
from tuner.specs import SLA

__all__ = [
    "HV_REFERENCE_MARGIN",
    "Miss",
    "ParetoResult",
    "RECOMMENDATION_RULE",
    "analyze",
    "closest_misses",
    "no_feasible_message",
    "hypervolume",
    "hypervolume_history",
    "knee_index",
    "non_dominated_mask",
    "to_minimization",
]


def to_minimization(values: np.ndarray, maximize: Sequence[bool]) -> np.ndarray:
    """Flip the sign of maximised columns so every objective is minimised."""
    sign = np.where(np.asarray(maximize, dtype=bool), -1.0, 1.0)
    return np.asarray(values, dtype=float).reshape(-1, len(sign)) * sign


def non_dominated_mask(points: np.ndarray) -> np.ndarray:
    """True for each point no other point dominates (<= everywhere, < somewhere)."""
    pts = np.asarray(points, dtype=float)
    n = len(pts)
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        le = np.all(pts <= pts[i], axis=1)
        lt = np.any(pts < pts[i], axis=1)
        if np.any(le & lt):
            mask[i] = False
    return mask


def _hv_2d(pts: np.ndarray, ref: np.ndarray) -> float:
    order = np.argsort(pts[:, 0], kind="stable")
    area, best_y = 0.0, ref[1]
    for x, y in pts[order]:
        if y < best_y:
            area += (ref[0] - x) * (best_y - y)
            best_y = y
    return float(area)


def _hv(pts: np.ndarray, ref: np.ndarray) -> float:
    d = pts.shape[1]
    if len(pts) == 0:
        return 0.0
    if d == 1:
        return float(ref[0] - pts[:, 0].min())
    if d == 2:
        return _hv_2d(pts, ref)
    # Slice along the last axis: between consecutive levels the dominated region is the
    # (d-1)-dimensional hypervolume of the points at or below that level.
    order = np.argsort(pts[:, -1], kind="stable")
    pts = pts[order]
    levels = np.append(pts[:, -1], ref[-1])
    total = 0.0
    for k in range(len(pts)):
        height = levels[k + 1] - levels[k]
        if height > 0:
            front = pts[: k + 1, :-1]
            total += height * _hv(front[non_dominated_mask(front)], ref[:-1])
    return float(total)


def hypervolume(points: np.ndarray, reference: Sequence[float]) -> float:
    """Volume dominated by `points` and bounded by `reference` (minimisation form)."""
    ref = np.asarray(reference, dtype=float)
    pts = np.asarray(points, dtype=float).reshape(-1, len(ref))
    pts = pts[np.all(pts < ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    return _hv(pts[non_dominated_mask(pts)], ref)


def hypervolume_history(points: np.ndarray, reference: Sequence[float]) -> list[float]:
    """Hypervolume after each prefix of `points` (trial order); NaN rows are skipped."""
    ref = np.asarray(reference, dtype=float)
    pts = np.asarray(points, dtype=float).reshape(-1, len(ref))
    history: list[float] = []
    front = np.empty((0, len(ref)))
    current = 0.0
    for p in pts:
        if not np.any(np.isnan(p)) and np.all(p < ref):
            dominated = len(front) and np.any(
                np.all(front <= p, axis=1) & np.any(front < p, axis=1) | np.all(front == p, axis=1)
            )
            if not dominated:
                # The front stays mutually non-dominated, so only `p` can dominate its points.
                beaten = np.all(p <= front, axis=1) & np.any(p < front, axis=1)
                front = np.vstack([front[~beaten], p])
                current = _hv(front, ref)
        history.append(current)
    return history


def knee_index(points: np.ndarray) -> int:
    """Index of the point closest to the ideal point after min-max normalising each objective."""
    pts = np.asarray(points, dtype=float)
    if len(pts) == 0:
        raise ValueError("knee of an empty front")
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    norm = (pts - lo) / span
    return int(np.argmin(np.linalg.norm(norm, axis=1)))


# ----------------------------------------------------------------------------- study analysis

# Recommend only variants that keep tuner.sla.SLA_HEADROOM below each SLA bound.
# For an objective without an SLA bound, the hypervolume reference sits this far beyond the
# worst feasible value (the usual "nadir + 10%" choice).
HV_REFERENCE_MARGIN = 0.10
RECOMMENDATION_RULE = (
    "Highest output tokens/s per GPU among variants that meet every SLA bound with at least "
    f"{SLA_HEADROOM:.0%} headroom (each bounded latency at the SLA percentile <= "
    f"{1 - SLA_HEADROOM:.0%} of its bound, and predicted x (1 + its error band) <= its bound, "
    "tuner.perf.bands); if none has that headroom, the highest-throughput "
    "variant that meets the SLA, flagged. Ties go to lower TPOT, then fewer GPUs."
)


class Miss(BaseModel):
    """An evaluated variant that failed the SLA (or could not run), and by how much."""

    number: int
    worst_relative: float  # largest value/bound - 1 over the bounds; inf if it could not run
    text: str


class ParetoResult(BaseModel):
    """Everything the report, CLI table and exports need about a finished study."""

    mode: str = "fixed"  # "capacity": each variant searched across load; "fixed": one load
    frontier: list[FrontPoint] = Field(default_factory=list)  # capacity mode: (variant, load) rows

    objective_names: list[str]
    maximize: list[bool]
    reference: list[float]  # hypervolume reference, minimisation form
    feasible: list[int]
    front: list[int]  # non-dominated feasible trial numbers, by throughput descending
    knee: int | None
    recommended: int | None
    headroom_met: bool
    hypervolume: float
    hv_history: list[float]  # after each trial, in trial-number order
    closest: list[Miss]
    rule: str = RECOMMENDATION_RULE


def _reference(sla: SLA, objectives: list[Objective], feasible_min: np.ndarray) -> list[float]:
    bounds = {"ttft_ms": sla.ttft_ms, "tpot_ms": sla.tpot_ms}
    ref = []
    for j, o in enumerate(objectives):
        if o.maximize:
            ref.append(0.0)  # throughput >= 0: the origin bounds the maximised axis
        elif bounds.get(o.name) is not None:
            ref.append(float(bounds[o.name]))  # type: ignore[arg-type]
        else:
            worst = float(feasible_min[:, j].max()) if len(feasible_min) else 1.0
            ref.append(worst * (1 + HV_REFERENCE_MARGIN))
    return ref


def _has_headroom(rec: TrialRecord, sla: SLA) -> bool:
    m = rec.metrics
    assert m is not None

    def band(quantity: str) -> float:
        pct = m.extra.get(f"{quantity}_band_pct")
        return pct / 100 if isinstance(pct, int | float) else 0.0

    # A predicted variant also keeps each bound with its latency x (1 + its error band).
    banded = meets_sla(m, sla, ttft_margin=band("ttft"), tpot_margin=band("tpot"))
    return banded and meets_sla(m, tightened(sla, SLA_HEADROOM))


def _recommend(feasible: list[TrialRecord], sla: SLA) -> tuple[int | None, bool]:
    roomy = [r for r in feasible if _has_headroom(r, sla)]
    pool, headroom = (roomy, True) if roomy else (feasible, False)
    if not pool:
        return None, False

    def rank(r: TrialRecord) -> tuple[float, float, int, int]:
        m, c = r.metrics, r.config
        assert m is not None and c is not None
        return (
            -m.output_tokens_per_s_per_gpu,
            m.tpot_ms.at(sla.percentile),
            c.tensor_parallel_size,
            r.number,
        )

    return min(pool, key=rank).number, headroom


def closest_misses(records: list[TrialRecord], sla: SLA, n: int = 3) -> list[Miss]:
    """The `n` evaluated variants nearest to meeting the SLA, each with what it misses."""
    misses = []
    for r in records:
        if not r.evaluated or r.meets(sla) or r.duplicate_of is not None:
            continue
        assert r.metrics is not None
        if not r.metrics.feasible:
            misses.append(
                Miss(
                    number=r.number,
                    worst_relative=float("inf"),
                    text=f"could not run: {r.metrics.reason}",
                )
            )
            continue
        viol = sla_violations(r.metrics, sla)
        missed = [v for v in viol if v.relative > 0]
        text = "; ".join(v.describe(sla.percentile) for v in missed)
        misses.append(
            Miss(number=r.number, worst_relative=max(v.relative for v in missed), text=text)
        )
    misses.sort(key=lambda m: (m.worst_relative, m.number))
    return misses[:n]


def _analyze_capacity(
    records: list[TrialRecord], sla: SLA, reference: Sequence[float] | None
) -> ParetoResult:
    """Capacity mode: the frontier over (variant, load) points and the goodput recommendation."""
    objectives = objectives_for(sla, capacity=True)
    ordered = sorted(records, key=lambda r: r.number)
    feasible = [r for r in ordered if r.meets(sla) and r.capacity is not None]
    frontier = capacity_frontier(ordered, sla)
    if reference is None:
        worst = max((q.tpot_ms for q in frontier), default=1.0)
        reference = [sla.tpot_ms or worst * (1 + HV_REFERENCE_MARGIN), 0.0]
    hv, history = frontier_history(ordered, sla, list(reference))
    front: list[int] = []
    for q in frontier:
        if q.trial not in front:
            front.append(q.trial)
    knee = None
    if frontier:
        pts = np.array([(q.tpot_ms, -q.output_tokens_per_s_per_gpu) for q in frontier])
        knee = frontier[knee_index(pts)].trial
    recommended, headroom = recommend_capacity(ordered, sla)
    return ParetoResult(
        mode="capacity",
        frontier=frontier,
        objective_names=[o.name for o in objectives],
        maximize=[o.maximize for o in objectives],
        reference=list(reference),
        feasible=[r.number for r in feasible],
        front=front,
        knee=knee,
        recommended=recommended,
        headroom_met=headroom,
        hypervolume=hv,
        hv_history=history,
        closest=[] if feasible else closest_misses(ordered, sla),
        rule=CAPACITY_RULE,
    )


def analyze(
    records: list[TrialRecord],
    sla: SLA,
    reference: Sequence[float] | None = None,
    *,
    capacity: bool | None = None,
) -> ParetoResult:
    """Pareto front, knee, hypervolume (and its history) and the recommendation of a study.

    `capacity` None: capacity mode when the records carry capacity searches.
    """
    if capacity is None:
        capacity = any(r.capacity is not None for r in records)
    if capacity:
        return _analyze_capacity(records, sla, reference)
    objectives = objectives_for(sla)
    maximize = [o.maximize for o in objectives]
    ordered = sorted(records, key=lambda r: r.number)
    feasible = [r for r in ordered if r.meets(sla)]
    values = np.array([r.objective_values(sla) for r in feasible]).reshape(-1, len(objectives))
    mins = to_minimization(values, maximize)
    ref = list(reference) if reference is not None else _reference(sla, objectives, mins)
    mask = non_dominated_mask(mins) if len(mins) else np.zeros(0, dtype=bool)
    front_recs = [r for r, keep in zip(feasible, mask, strict=True) if keep]
    front_recs.sort(key=lambda r: -r.objective_values(sla)[-1])
    knee = None
    if front_recs:
        front_pts = to_minimization(
            np.array([r.objective_values(sla) for r in front_recs]), maximize
        )
        knee = front_recs[knee_index(front_pts)].number
    feasible_numbers = {r.number for r in feasible}
    history_pts = np.array(
        [
            to_minimization(np.array(r.objective_values(sla)), maximize)[0]
            if r.number in feasible_numbers
            else np.full(len(objectives), np.nan)
            for r in ordered
        ]
    ).reshape(-1, len(objectives))
    recommended, headroom = _recommend(feasible, sla)
    return ParetoResult(
        objective_names=[o.name for o in objectives],
        maximize=maximize,
        reference=ref,
        feasible=[r.number for r in feasible],
        front=[r.number for r in front_recs],
        knee=knee,
        recommended=recommended,
        headroom_met=headroom,
        hypervolume=hypervolume(mins, ref) if len(mins) else 0.0,
        hv_history=hypervolume_history(history_pts, ref),
        closest=[] if feasible else closest_misses(ordered, sla),
    )


def no_feasible_message(result: ParetoResult, sla: SLA, total: int) -> str:
    """Plain words for a study where nothing met the SLA, naming the closest variants."""
    head = (
        f"no variant met the SLA ({bounds_text(sla, 'memory fit')}) in {total} trials; "
        "nothing is recommended."
    )
    lines = [head]
    if result.closest:
        lines.append("Closest variants:")
        lines += [f"  trial {m.number}: {m.text}" for m in result.closest]
    return "\n".join(lines)
