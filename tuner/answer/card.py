"""The answer card: the recommendation in a headline and a few lines (capacity, operating load,
binding limit, what speculation rests on, what each knob is worth, what the SLA costs), computed
once from the recommended record and the explanations around it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tuner.explain.sensitivity import KnobEffect, effect_text, top_effects
from tuner.explain.sla_cost import SLACostPoint, sla_cost_text
from tuner.export.registry import engine_label
from tuner.knobs.registry import short_config
from tuner.perf.load import format_load, load_unit
from tuner.perf.prefix_sim import prefix_cache_text
from tuner.perf.speculative import acceptance_note
from tuner.search.trials import TrialRecord

__all__ = ["AnswerCard", "Explanations", "answer_card"]


class Explanations(BaseModel):
    """What the run folder computed around the recommendation (tuner.explain)."""

    sensitivity: list[KnobEffect] = Field(default_factory=list)
    sla_cost: list[SLACostPoint] = Field(default_factory=list)


class AnswerCard(BaseModel):
    """The recommendation in a headline and a few lines, the binding limit among them."""

    headline: str
    lines: list[str]
    binding: list[str] = Field(default_factory=list, description="The bound, then the driver")


def answer_card(rec: TrialRecord, pct: int, explained: Explanations) -> AnswerCard | None:
    """The card of a capacity run's recommended record (None without a capacity search)."""
    cap = rec.capacity
    if rec.config is None or cap is None or cap.at_sla is None:
        return None
    top, op, unit = cap.at_sla, cap.operating, load_unit(cap.mode)

    def at(p: Any) -> str:
        return (
            f"{p.requests_per_s_per_gpu:,.2f} req/s per GPU ({p.output_tokens_per_s_per_gpu:,.0f}"
            f" output tok/s per GPU) at {format_load(p.load, cap.mode)} {unit} per replica: "
            f"TTFT P{pct} {p.ttft_ms.at(pct):,.1f} ms, TPOT P{pct} {p.tpot_ms.at(pct):,.2f} ms"
        )

    loads = [q.load for q in cap.points]
    lines = [
        f"Capacity at the SLA: {at(top)}",
        f"Load searched: {format_load(min(loads), cap.mode)} to "
        f"{format_load(max(loads), cap.mode)} {unit} per replica in {cap.probes} probes",
    ]
    if op is not None:
        lines.append(f"Operate at ({cap.headroom:.0%} headroom and the error band): {at(op)}")
    if note := acceptance_note(rec.config, rec.metrics):
        lines.append(note.line("Speculation"))
    if top3 := top_effects(explained.sensitivity):
        lines.append("Worth most (one knob alone, simulator): " + "; ".join(map(effect_text, top3)))
    if explained.sla_cost:
        lines.append("What the SLA costs: " + "; ".join(sla_cost_text(explained.sla_cost)))
    extra = rec.metrics.extra if rec.metrics else {}
    if cache := prefix_cache_text(extra):  # a trace's reuse, emerged at the capacity load
        lines.append(cache[0].upper() + cache[1:])
    binding = [str(extra[k]) for k in ("binding_bound_text", "binding_driver_text") if k in extra]
    return AnswerCard(
        headline=(
            f"Recommended: trial {rec.number}: {short_config(rec.config)} "
            f"on {engine_label(rec.config, rec.metrics)}"
        ),
        lines=lines,
        binding=binding,
    )
