"""The report's answer, shown first: the recommendation card (tuner.answer.card, computed once
with the analysed run), what each knob is worth and what the SLA costs, as Plotly figure dicts
and HTML."""

from __future__ import annotations

import html
from typing import Any

from tuner.answer.card import AnswerCard, Explanations
from tuner.explain.sensitivity import KnobEffect
from tuner.explain.sla_cost import SLACostPoint

__all__ = [
    "answer_html",
    "explanation_figures",
    "sensitivity_table_html",
]


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
