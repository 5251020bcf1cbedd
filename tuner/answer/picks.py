"""Which front variant each engine gets (the best-ranked one of its own engine that it can
express), with its export built once and a sentence saying which variant it is and the load to
drive it at. The recommended variant's engine comes first: its export is the primary one."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.export import Exporter, exporters
from tuner.export.bundle import EngineExport
from tuner.export.dispatch import export_config, expressible
from tuner.export.registry import engine_words, other_engine_reason
from tuner.perf.load import load_unit
from tuner.run_spec import RunSpec
from tuner.search.frontier import ranked_by_capacity
from tuner.search.pareto import ParetoResult
from tuner.search.trials import TrialRecord

__all__ = ["EnginePick", "engine_picks"]


@dataclass(frozen=True)
class EnginePick:
    """The variant an engine is given, its launch files and which variant it is, in words;
    `primary`: this exporter launches the recommended variant's engine (listed first)."""

    record: TrialRecord
    export: EngineExport
    note: str
    primary: bool = False


def _ranked(records: list[TrialRecord], result: ParetoResult, spec: RunSpec) -> list[TrialRecord]:
    if result.mode == "capacity":
        return ranked_by_capacity(records, spec.sla)
    by_number = {r.number: r for r in records}
    first = [by_number[result.recommended]] if result.recommended is not None else []
    return first + [by_number[n] for n in result.front if n != result.recommended]


def _engine_of(record: TrialRecord) -> str:
    assert record.config is not None
    return record.config.engine.value


def _note(
    pick: TrialRecord, recommended: TrialRecord, why_not: str | None, exporter: Exporter
) -> str:
    which = "the recommended variant"
    elsewhere = _engine_of(recommended)
    if pick.number != recommended.number and elsewhere != exporter.runs:
        which = (
            f"trial {pick.number}, the best {engine_words(exporter.runs)} variant (the "
            f"recommended trial {recommended.number} runs on {engine_words(elsewhere)})"
        )
    elif pick.number != recommended.number:
        which = (
            f"trial {pick.number}, the best variant {exporter.name} can express (the "
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


def _none(
    exporter: Exporter, ranked: list[TrialRecord], refusals: dict[int, str], spec: RunSpec
) -> str:
    """Why an engine gets no files: the first refusal of a variant of its own engine, else that
    the run has none (a knob no exporter spells is still named)."""
    own = [refusals[r.number] for r in ranked if _engine_of(r) == exporter.runs]
    if own:
        return f"no front variant is expressible (first: {own[0]})"
    searched = [e.value for e in spec.space.engine]
    why = (
        f"no {engine_words(exporter.runs)} variant met the SLA"
        if exporter.runs in searched
        else f"engine={exporter.runs} was not searched (the space has {', '.join(searched)})"
    )
    # A refusal other than "runs on another engine" names a knob this exporter lacks.
    knob = next(
        (
            refusals[r.number]
            for r in ranked
            if r.config is not None
            and refusals[r.number] != other_engine_reason(exporter, r.config)
        ),
        None,
    )
    return why if knob is None else f"{why}; and {knob}"


def _pick(
    exporter: Exporter, ranked: list[TrialRecord], spec: RunSpec, recommended: TrialRecord | None
) -> EnginePick | str:
    engine = exporter.name
    refusals: dict[int, str] = {}
    for r in ranked:
        assert r.config is not None
        exp = export_config(r.config, spec, r.metrics, engines=(engine,))[engine]
        if isinstance(exp, str):
            refusals[r.number] = exp
            continue
        rec = recommended or r
        primary = _engine_of(rec) == exporter.runs
        why_not = refusals.get(rec.number)
        # Ranked after its pick, of this engine: asked once (another engine's needs no reason).
        if why_not is None and rec.number != r.number and primary:
            assert rec.config is not None
            why_not = expressible(engine, rec.config, spec)
        return EnginePick(r, exp, _note(r, rec, why_not, exporter), primary)
    return _none(exporter, ranked, refusals, spec)


def engine_picks(
    records: list[TrialRecord], result: ParetoResult, spec: RunSpec
) -> dict[str, EnginePick | str]:
    """Per engine: the best-ranked variant of its own engine that it can express with its
    export, or why none can be; the recommended variant's engine first, then registry order."""
    ranked = _ranked(records, result, spec)
    recommended = next((r for r in records if r.number == result.recommended), None)
    picks = {e.name: _pick(e, ranked, spec, recommended) for e in exporters()}
    # Stable: the exporters of the recommended engine lead (with their files, or why none),
    # the rest keep registry order.
    lead = _engine_of(recommended) if recommended is not None else None
    first = [e.name for e in exporters() if e.runs == lead]
    return {e: picks[e] for e in [*first, *(e for e in picks if e not in first)]}
