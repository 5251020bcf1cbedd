"""Multi-fidelity tune: the simulator screens the whole space, the real backend measures the
top-K variants of the predicted front plus the engine's own defaults, and only measured variants
are recommended (`tuner tune --backend vllm|torch --screen sim --confirm K`).

The screen is an ordinary sim capacity tune of the same run (same model, device profile, SLA,
workload, space, sampler and trials), written to RUN/screen/. Each confirmed variant is then
measured with the backend's capacity search on one server, within the run's probe budget; an
overall time budget skips the variants not yet started once it is spent.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tuner.backends import Backend, evaluate_capacity
from tuner.backends.sim import SimBackend
from tuner.perf.capacity import Capacity, ProbeBudget, workload_at
from tuner.run.spec import RunSpec
from tuner.search.frontier import ranked_by_capacity
from tuner.search.trials import TrialRecord
from tuner.specs import Context, EngineConfig, Metrics
from tuner.validity import invalid_reason

__all__ = [
    "MAX_CONFIRM",
    "ConfirmOptions",
    "ConfirmedVariant",
    "config_key",
    "Side",
    "gain_over_defaults",
    "measure_variants",
    "pick_candidates",
    "recommend_measured",
    "screen_spec",
]

# More confirmations than this is a typo: each one starts a real server for minutes.
MAX_CONFIRM = 50
SCREENS = ("sim",)


class ConfirmOptions(BaseModel):
    """How a multi-fidelity tune screens and confirms."""

    model_config = ConfigDict(extra="forbid")

    screen: Literal["sim"] = "sim"
    confirm: int = Field(default=3, ge=1, le=MAX_CONFIRM, description="Variants to measure")
    confirm_seconds: float | None = Field(
        default=None, gt=0, description="Measurement time budget; later variants are skipped"
    )
    refit: bool = Field(default=False, description="Refit the device profile from the results")


class Side(BaseModel):
    """One side (predicted or measured) of a confirmed variant, at the SLA percentile."""

    model_config = ConfigDict(extra="forbid")

    capacity_load: float | None = Field(description="Highest load meeting the SLA (None: none)")
    capacity_rps_per_gpu: float
    capacity_tok_s_per_gpu: float
    ttft_ms: float | None = Field(description="At the compared load")
    tpot_ms: float | None = Field(description="At the compared load")


class ConfirmedVariant(BaseModel):
    """A variant the real backend was asked to measure, with the simulator's prediction."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["baseline", "candidate"]
    predicted_rank: int | None = Field(description="Rank on the predicted front (1 = best)")
    screen_trial: int | None = Field(description="Trial number in RUN/screen")
    config: EngineConfig
    status: Literal["measured", "infeasible", "skipped"] = "skipped"
    reason: str | None = None
    compared_load: float | None = Field(
        default=None, description="The load both sides are compared at: the measured capacity "
        "load, else the lightest load probed"
    )  # fmt: skip
    predicted: Side | None = None
    measured: Side | None = None
    capacity: Capacity | None = None
    metrics: Metrics | None = None
    wall_s: float = 0.0
    restored: bool = Field(
        default=False,
        exclude=True,
        description="Measured by an earlier, interrupted run of this folder",
    )

    @property
    def meets_sla(self) -> bool:
        """Whether the measurement found a load meeting the SLA."""
        return (
            self.status == "measured"
            and self.capacity is not None
            and (self.capacity.at_sla is not None)
        )

    def rel_error(self, field: str) -> float | None:
        """predicted / measured - 1 of a Side field (None when either side lacks it)."""
        if self.predicted is None or self.measured is None:
            return None
        p, m = getattr(self.predicted, field), getattr(self.measured, field)
        if p is None or m is None or m == 0:
            return None
        return float(p / m - 1.0)


def screen_spec(spec: RunSpec) -> RunSpec:
    """The sim run that screens `spec`'s space: same inputs, the simulator's own probe budget."""
    return spec.model_copy(update={
        "backend": "sim", "backend_options": {}, "probe_budget": ProbeBudget(), "storage": None,
    })  # fmt: skip


def _refusal(backend: Backend, config: EngineConfig, ctx: Context) -> str | None:
    check = getattr(backend, "cannot_run", None)
    return check(config, ctx) if check is not None else invalid_reason(config, ctx)


def config_key(config: EngineConfig) -> str:
    """A variant's knobs as one canonical string (what makes two variants the same)."""
    return json.dumps(config.model_dump(mode="json"), sort_keys=True)


def pick_candidates(
    records: list[TrialRecord], spec: RunSpec, backend: Backend, k: int, baseline: EngineConfig
) -> tuple[list[ConfirmedVariant], list[str]]:
    """The best `k` distinct predicted variants `backend` can run (the baseline's knobs excluded:
    it is measured anyway), and a line per front variant passed over because it cannot run."""
    ctx = spec.context()
    seen, chosen, passed = {config_key(baseline)}, list[ConfirmedVariant](), list[str]()
    for rank, r in enumerate(ranked_by_capacity(records, spec.sla), start=1):
        if len(chosen) == k:
            break
        assert r.config is not None
        if config_key(r.config) in seen:
            continue
        if why := _refusal(backend, r.config, ctx):
            passed.append(f"trial {r.number} (rank {rank}): {why}")
            continue
        seen.add(config_key(r.config))
        chosen.append(ConfirmedVariant(role="candidate", predicted_rank=rank,
                                       screen_trial=r.number, config=r.config))  # fmt: skip
    return chosen, passed


def _side(cap: Capacity, at: Metrics | None, pct: int) -> Side:
    top = cap.at_sla
    return Side(
        capacity_load=top.load if top else None,
        capacity_rps_per_gpu=cap.rps_per_gpu,
        capacity_tok_s_per_gpu=cap.tok_s_per_gpu,
        ttft_ms=at.ttft_ms.at(pct) if at is not None and at.feasible else None,
        tpot_ms=at.tpot_ms.at(pct) if at is not None and at.feasible else None,
    )


def _compared_load(cap: Capacity) -> float | None:
    top = cap.at_sla
    if top is not None:
        return top.load
    return min(p.load for p in cap.points) if cap.points else None


def _predict(v: ConfirmedVariant, spec: RunSpec) -> None:
    """The simulator's capacity of `v` and its latencies at the load measured."""
    sim, ctx = SimBackend(), spec.context()
    cap, _ = evaluate_capacity(sim, v.config, ctx, mode=spec.capacity_load,
                               budget=screen_spec(spec).probe_budget)  # fmt: skip
    at = None
    if v.compared_load is not None:
        wl = workload_at(ctx.workload, spec.capacity_load, v.compared_load)
        at = sim.evaluate(v.config, ctx.model_copy(update={"workload": wl}))
    v.predicted = _side(cap, at, spec.sla.percentile)


def _budget_left(spec: RunSpec, left_s: float | None) -> ProbeBudget:
    """The run's probe budget, its seconds capped by the time the confirmation has left."""
    budget = spec.probe_budget
    if left_s is None:
        return budget
    cap = min(budget.max_seconds or math.inf, left_s)
    return budget.model_copy(update={"max_seconds": cap})


def measure_variants(
    variants: list[ConfirmedVariant],
    spec: RunSpec,
    backend: Backend,
    seconds: float | None,
    on_variant: Callable[[ConfirmedVariant], None] = lambda v: None,
) -> None:
    """Measure each variant's capacity in order (filling it in); once `seconds` are spent the
    rest are skipped with the reason. Every variant also gets the simulator's prediction; a
    variant restored from an earlier run's journal is kept as it was measured."""
    started = time.perf_counter()
    ctx = spec.context()
    for v in variants:
        if v.restored:
            on_variant(v)
            continue
        left = None if seconds is None else seconds - (time.perf_counter() - started)
        if left is not None and left <= 0:
            v.status, v.reason = (
                "skipped",
                f"the --confirm-seconds budget ({seconds:g} s) was spent",
            )
        else:
            t0 = time.perf_counter()
            cap, metrics = evaluate_capacity(backend, v.config, ctx, mode=spec.capacity_load,
                                             budget=_budget_left(spec, left))  # fmt: skip
            v.wall_s = round(time.perf_counter() - t0, 1)
            v.capacity, v.metrics = cap, metrics
            v.status = "measured" if metrics.feasible else "infeasible"
            v.reason = metrics.reason
            v.compared_load = _compared_load(cap)
            at = metrics if metrics.feasible else None
            v.measured = _side(cap, at, spec.sla.percentile)
        _predict(v, spec)
        on_variant(v)


def recommend_measured(variants: list[ConfirmedVariant]) -> ConfirmedVariant | None:
    """The measured variant with the highest capacity (goodput at the SLA); ties: lower TPOT."""
    ok = [v for v in variants if v.meets_sla and v.measured is not None]
    if not ok:
        return None

    def rank(v: ConfirmedVariant) -> tuple[float, float]:
        assert v.measured is not None
        return (v.measured.capacity_tok_s_per_gpu, -(v.measured.tpot_ms or math.inf))

    return max(ok, key=rank)


def gain_over_defaults(
    recommended: ConfirmedVariant | None, baseline: ConfirmedVariant
) -> float | None:
    """recommended / baseline measured capacity - 1 (None when the defaults met no load)."""
    if recommended is None or not baseline.meets_sla or baseline.measured is None:
        return None
    assert recommended.measured is not None
    base = baseline.measured.capacity_tok_s_per_gpu
    return recommended.measured.capacity_tok_s_per_gpu / base - 1.0 if base > 0 else None
