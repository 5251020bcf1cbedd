"""The report's answer, shown first: the recommendation card (capacity, operating load, binding
limit, what speculation rests on), what each knob is worth and what the SLA costs.

Data first (`AnswerCard`, computed from the recommended record and the explanations the run
folder wrote next to it), then plain Plotly figure dicts and HTML.
"""

from __future__ import annotations

import html
from typing import Any

from pydantic import BaseModel, Field

from tuner.explain.sensitivity import KnobEffect, effect_text, top_effects
from tuner.explain.sla_cost import SLACostPoint, sla_cost_text
from tuner.knobs.registry import short_config
from tuner.perf.load import format_load, load_unit
from tuner.perf.speculative import acceptance_note
from tuner.search.trials import TrialRecord

__all__ = [
    "AnswerCard",
    "Explanations",
    "answer_card",
    "answer_html",
    "explanation_figures",
    "sensitivity_table_html",
]


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
    binding = [str(extra[k]) for k in ("binding_bound_text", "binding_driver_text") if k in extra]
    return AnswerCard(
        headline=f"Recommended: trial {rec.number}: {short_config(rec.config)}",
        lines=lines,
        binding=binding,
    )


def answer_html(card: AnswerCard) -> str:
    """The card as HTML (user text escaped)."""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in card.lines)
    binding = ""
    if card.binding:
        bound, *why = card.binding
        binding = (
            f'<p class="binding"><b>Binding limit:</b> {html.escape(bound)}'
            + "".join(f"<br>{html.escape(w)}" for w in why)
            + "</p>"
        )
    return (
        f'<div class="ok card"><p><b>{html.escape(card.headline)}</b></p>'
        f"{binding}<ul>{items}</ul></div>"
    )


def _sensitivity_figure(effects: list[KnobEffect]) -> dict[str, Any]:
    """Capacity change of each one-knob move, largest change on top, gains green."""
    rows = sorted(
        (e for e in effects if e.change_pct is not None), key=lambda e: abs(e.change_pct or 0)
    )
    pcts = [e.change_pct or 0.0 for e in rows]
    return {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "name": "capacity change",
                "y": [f"{e.knob} = {e.value}" for e in rows],
                "x": pcts,
                "marker": {"color": ["#2ca02c" if p > 0 else "#d62728" for p in pcts]},
                "hovertemplate": "%{y}: %{x:+.1f}%<extra></extra>",
            }
        ],
        "layout": {
            "title": {"text": "What each knob is worth: capacity if it alone moves (simulator)"},
            "xaxis": {"title": {"text": "capacity change vs the recommended variant (%)"}},
            "yaxis": {"automargin": True},
            "height": max(300, 28 * len(rows) + 120),
        },
    }


def _sla_cost_figure(points: list[SLACostPoint]) -> dict[str, Any]:
    """Capacity per GPU as each SLA bound is scaled (0.5x tighter ... 2x looser)."""
    traces = []
    for bound in ("ttft", "tpot", "both"):
        pts = sorted((p for p in points if p.bound == bound), key=lambda p: p.scale)
        if not pts:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "markers+lines",
                "name": {"ttft": "TTFT bound", "tpot": "TPOT bound", "both": "both bounds"}[bound],
                "x": [p.scale for p in pts],
                "y": [p.capacity_rps_per_gpu for p in pts],
                "text": [_cost_hover(p) for p in pts],
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    return {
        "data": traces,
        "layout": {
            "title": {"text": "What the SLA costs: capacity of the pick as a bound is scaled"},
            "xaxis": {"title": {"text": "SLA bound x (1 = the SLA asked for)"}, "type": "log"},
            "yaxis": {"title": {"text": "capacity (req/s per GPU)"}, "rangemode": "tozero"},
            "height": 420,
        },
    }


def _cost_hover(p: SLACostPoint) -> str:
    bounds = ", ".join(
        f"{name} {v:g} ms" for name, v in (("TTFT", p.ttft_ms), ("TPOT", p.tpot_ms)) if v
    )
    text = f"{bounds}: {p.capacity_rps_per_gpu:.2f} req/s per GPU"
    if p.cost_vs_sla is not None:
        text += f"<br>{p.cost_vs_sla:.2f}x the GPUs of the SLA asked for"
    if p.usd_per_million_output_tokens is not None:
        text += f"<br>${p.usd_per_million_output_tokens:.3f} per million output tokens"
    return text


def explanation_figures(explained: Explanations) -> dict[str, dict[str, Any]]:
    """The sensitivity and SLA-cost figures by element id (those with data)."""
    figs = {}
    if any(e.change_pct is not None for e in explained.sensitivity):
        figs["sensitivity"] = _sensitivity_figure(explained.sensitivity)
    if len(explained.sla_cost) > 1:
        figs["sla-cost"] = _sla_cost_figure(explained.sla_cost)
    return figs


def sensitivity_table_html(effects: list[KnobEffect]) -> str:
    """Every one-knob move with its capacity (sensitivity.csv as a table)."""
    if not effects:
        return ""
    head = ("knob", "recommended", "moved to", "capacity req/s/GPU", "change", "note")
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for e in sorted(effects, key=lambda e: (e.change_pct is None, -abs(e.change_pct or 0))):
        pct = e.change_pct
        cells = (
            e.knob,
            str(e.base_value),
            str(e.value),
            "" if e.capacity_rps_per_gpu is None else f"{e.capacity_rps_per_gpu:.3g}",
            "" if pct is None else f"{pct:+.1f}%",
            e.reason or "",
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return (
        "<h2>What each knob is worth (one knob alone, simulator)</h2>"
        '<table class="sensitivity">' + "".join(rows) + "</table>"
    )
