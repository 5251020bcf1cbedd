"""The analysed run: everything a finished run's outputs say, computed once after the search."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner import catalog
from tuner.answer.card import AnswerCard, Explanations, answer_card
from tuner.answer.picks import EnginePick, engine_picks
from tuner.explain.sensitivity import knob_sensitivity
from tuner.explain.sla_cost import sla_cost_curve
from tuner.run_spec import RunSpec
from tuner.search.deployments import DeploymentChoice, compare_deployments
from tuner.search.pareto import ParetoResult
from tuner.search.trials import TrialRecord

__all__ = ["AnalysedRun", "analyse_run"]


@dataclass
class AnalysedRun:
    """A run's records and front, the picks per engine with their exports, the explanations
    around the recommendation and its answer card: the terminal summary, best.yaml,
    exports/README.md and report.html render this and compute nothing of it again."""

    spec: RunSpec
    records: list[TrialRecord]
    result: ParetoResult
    importance: dict[str, dict[str, float]] = field(default_factory=dict)
    recommended: TrialRecord | None = None
    picks: dict[str, EnginePick | str] | None = None  # None: nothing is recommended
    explained: Explanations = field(default_factory=Explanations)
    card: AnswerCard | None = None
    deployments: DeploymentChoice | None = None  # aggregated vs disaggregated (simulated)


def _explain(spec: RunSpec, rec: TrialRecord | None, result: ParetoResult) -> Explanations:
    """One-knob sensitivity and the SLA-cost curve around a capacity run's recommendation."""
    if result.mode != "capacity" or rec is None or rec.config is None:
        return Explanations()
    ctx, mode = spec.context(), spec.capacity_load
    return Explanations(
        sensitivity=knob_sensitivity(rec.config, ctx, spec.space, mode),
        sla_cost=sla_cost_curve(rec.config, ctx, mode),
    )


def _deployments(spec: RunSpec, rec: TrialRecord | None, mode: str) -> DeploymentChoice | None:
    """A simulated rate-mode run's recommendation against disaggregated deployments of it."""
    if mode != "capacity" or spec.backend != "sim" or spec.capacity_load != "rate":
        return None
    if rec is None or rec.config is None or rec.capacity is None:
        return None
    ctx = spec.context()
    if ctx.num_gpus < 2:
        return None
    node = catalog.node_for_gpu(ctx.gpu)
    return compare_deployments(
        rec.config, ctx, node, aggregated_rps_per_gpu=rec.capacity.rps_per_gpu
    )


def analyse_run(
    spec: RunSpec,
    records: list[TrialRecord],
    result: ParetoResult,
    importance: dict[str, dict[str, float]] | None = None,
) -> AnalysedRun:
    """Analyse a finished (or rebuilt) run once: picks and exports, explanations, answer card."""
    rec = next((r for r in records if r.number == result.recommended), None)
    explained = _explain(spec, rec, result)
    return AnalysedRun(
        spec=spec,
        records=records,
        result=result,
        importance=importance or {},
        recommended=rec,
        picks=engine_picks(records, result, spec) if rec is not None else None,
        explained=explained,
        card=answer_card(rec, spec.sla.percentile, explained) if rec is not None else None,
        deployments=_deployments(spec, rec, result.mode),
    )
