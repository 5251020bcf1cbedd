"""Which front variant each engine gets (the best-ranked one it can express), with its export
built once and a sentence saying which variant it is and the load to drive it at."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.export import ENGINES
from tuner.export.bundle import EngineExport
from tuner.export.dispatch import export_config, expressible
from tuner.perf.load import load_unit
from tuner.run_spec import RunSpec
from tuner.search.frontier import ranked_by_capacity
from tuner.search.pareto import ParetoResult
from tuner.search.trials import TrialRecord

__all__ = ["EnginePick", "engine_picks"]


@dataclass(frozen=True)
class EnginePick:
    """The variant an engine is given, its launch files and which variant it is, in words."""

    record: TrialRecord
    export: EngineExport
    note: str


def _ranked(records: list[TrialRecord], result: ParetoResult, spec: RunSpec) -> list[TrialRecord]:
    if result.mode == "capacity":
        return ranked_by_capacity(records, spec.sla)
    by_number = {r.number: r for r in records}
    first = [by_number[result.recommended]] if result.recommended is not None else []
    return first + [by_number[n] for n in result.front if n != result.recommended]


def _note(pick: TrialRecord, recommended: TrialRecord, why_not: str | None, engine: str) -> str:
    which = "the recommended variant"
    if pick.number != recommended.number:
        which = (
            f"trial {pick.number}, the best variant {engine} can express (the "
            f"recommended trial {recommended.number} is not: {why_not})"
        )
    cap = pick.capacity
    op = (cap.operating or cap.at_sla) if cap else None
    if op is not None and cap is not None:
        which += (
            f"; drive it at {op.load:.4g} {load_unit(cap.mode)} per replica "
            f"({op.output_tokens_per_s_per_gpu:.0f} output tok/s per GPU)"
        )
    return which


def _pick(
    engine: str, ranked: list[TrialRecord], spec: RunSpec, recommended: TrialRecord | None
) -> EnginePick | str:
    refusals: dict[int, str] = {}
    for r in ranked:
        assert r.config is not None
        exp = export_config(r.config, spec, r.metrics, engines=(engine,))[engine]
        if isinstance(exp, str):
            refusals[r.number] = exp
            continue
        rec = recommended or r
        why_not = refusals.get(rec.number)
        if why_not is None and rec.number != r.number:  # ranked after its pick: asked once
            assert rec.config is not None
            why_not = expressible(engine, rec.config, spec)
        return EnginePick(r, exp, _note(r, rec, why_not, engine))
    first = next(iter(refusals.values()), "no variant met the SLA")
    return f"no front variant is expressible (first: {first})"


def engine_picks(
    records: list[TrialRecord], result: ParetoResult, spec: RunSpec
) -> dict[str, EnginePick | str]:
    """Per engine: the best-ranked variant it can express with its export, or why none can be."""
    ranked = _ranked(records, result, spec)
    recommended = next((r for r in records if r.number == result.recommended), None)
    return {engine: _pick(engine, ranked, spec, recommended) for engine in ENGINES}
