"""The report's Plotly figures (as plain dicts): Pareto fronts, knobs, history, importance."""

from __future__ import annotations

import math
from typing import Any

from tuner.knobs import color_for
from tuner.knobs import get as get_knob
from tuner.report.answer import explanation_figures
from tuner.report.capacity import capacity_figures
from tuner.report.data import Point, ReportData
from tuner.report.shapes import SLA_LINE, hline
from tuner.search.trials import KNOBS as KNOB_COLUMNS

__all__ = ["FADED_COLOR", "FRONT_COLOR_KNOB", "figures"]

# The Pareto plot colours the front by this knob; colours come from the registry's choices.
FRONT_COLOR_KNOB = "quantization"
FADED_COLOR = "rgba(120,120,120,0.25)"


def _scatter(name: str, pts: list[Point], latency: str, marker: dict[str, Any]) -> dict[str, Any]:
    """Points as throughput per GPU (x) against one latency (y), their knobs on hover."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": [p.tput_per_gpu for p in pts],
        "y": [getattr(p, latency) for p in pts],
        "text": [p.hover for p in pts],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": marker,
    }


def _star(p: Point, latency: str) -> dict[str, Any]:
    """The recommended variant: a labelled gold star."""
    return {
        "type": "scatter",
        "mode": "markers+text",
        "name": "recommended",
        "x": [p.tput_per_gpu],
        "y": [getattr(p, latency)],
        "text": ["recommended"],
        "textposition": "top center",
        "hovertext": [p.hover],
        "hovertemplate": "%{hovertext}<extra></extra>",
        "marker": {
            "symbol": "star",
            "size": 22,
            "color": "gold",
            "line": {"width": 2, "color": "#000"},
        },
    }


def _front_figure(data: ReportData, latency: str) -> dict[str, Any]:
    """Latency (TTFT or TPOT) vs throughput per GPU: all trials faded, front by quantization."""
    label = "TPOT" if latency == "tpot_ms" else "TTFT"
    bound = data.tpot_bound_ms if latency == "tpot_ms" else data.ttft_bound_ms
    others = [p for p in data.points if not p.on_front]
    traces = [_scatter("all trials", others, latency, {"color": FADED_COLOR, "size": 6})]
    on_front = [p for p in data.points if p.on_front]
    order = get_knob(FRONT_COLOR_KNOB).choices or ()
    seen = {p.knobs[FRONT_COLOR_KNOB] for p in on_front}
    # Every value on the front gets a trace: known choices in registry order, then any other.
    for quant in [*(v for v in order if v in seen), *sorted(seen - set(order), key=str)]:
        pts = sorted(
            (p for p in on_front if p.knobs[FRONT_COLOR_KNOB] == quant),
            key=lambda p: p.tput_per_gpu,
        )
        color = color_for(FRONT_COLOR_KNOB, quant)
        marker = {"color": color, "size": 11, "line": {"width": 1, "color": "#222"}}
        traces.append(_scatter(f"Pareto: {quant}", pts, latency, marker))
    traces += [_star(p, latency) for p in data.points if p.recommended][:1]
    layout = {
        "title": {"text": f"{label} P{data.percentile} vs output tokens/s per GPU"},
        "xaxis": {"title": {"text": "output tokens/s per GPU"}},
        "yaxis": {"title": {"text": f"{label} P{data.percentile} (ms)"}, "type": "log"},
        "shapes": [] if bound is None else [hline(bound, SLA_LINE | {"width": 2})],
        "annotations": [] if bound is None else [_bound_note(label, bound)],
        "legend": {"orientation": "h", "y": -0.2},
        "height": 520,
    }
    return {"data": traces, "layout": layout}


def _bound_note(label: str, bound: float) -> dict[str, Any]:
    """The text beside the SLA line."""
    return {
        "xref": "paper",
        "x": 1,
        "y": math.log10(bound),
        "yref": "y",
        "xanchor": "right",
        "text": f"SLA {label} {bound:g} ms",
        "showarrow": False,
        "font": {"color": "crimson"},
        "yanchor": "bottom",
    }


def _parallel_figure(data: ReportData) -> dict[str, Any]:
    dims = []
    for knob in KNOB_COLUMNS:
        values = [p.knobs[knob] for p in data.points]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            dims.append({"label": knob, "values": values})
        else:
            cats = sorted({str(v) for v in values})
            dims.append(
                {
                    "label": knob,
                    "values": [cats.index(str(v)) for v in values],
                    "tickvals": list(range(len(cats))),
                    "ticktext": cats,
                }
            )
    dims.append({"label": "tok/s/GPU", "values": [p.tput_per_gpu for p in data.points]})
    color = [p.tput_per_gpu if p.meets_sla else 0.0 for p in data.points]
    trace = {
        "type": "parcoords",
        "dimensions": dims,
        "line": {
            "color": color,
            "colorscale": "Viridis",
            "showscale": True,
            "colorbar": {"title": {"text": "tok/s/GPU (0 = misses SLA)"}},
        },
    }
    return {
        "data": [trace],
        "layout": {"title": {"text": "Knobs of every evaluated trial"}, "height": 480},
    }


def _history_figure(data: ReportData) -> dict[str, Any]:
    xs = data.history_numbers
    traces = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "feasible trial tok/s/GPU",
            "x": xs,
            "y": data.history_tput,
            "marker": {"color": "#1f77b4", "size": 6},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "best so far",
            "x": xs,
            "y": data.best_so_far,
            "line": {"color": "#1f77b4", "shape": "hv"},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "hypervolume",
            "x": xs,
            "y": data.hv_history,
            "yaxis": "y2",
            "line": {"color": "#ff7f0e"},
        },
    ]
    layout = {
        "title": {"text": "Optimisation history"},
        "xaxis": {"title": {"text": "trial"}},
        "yaxis": {"title": {"text": "output tokens/s per GPU (meets SLA)"}},
        "yaxis2": {"title": {"text": "hypervolume"}, "overlaying": "y", "side": "right"},
        "legend": {"orientation": "h", "y": -0.2},
        "height": 440,
    }
    return {"data": traces, "layout": layout}


def _importance_figure(data: ReportData) -> dict[str, Any]:
    traces = []
    for objective, scores in data.importance.items():
        knobs = sorted(scores, key=lambda k: scores[k])
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": objective,
                "y": knobs,
                "x": [scores[k] for k in knobs],
            }
        )
    layout = {
        "title": {"text": "Parameter importance (PED-ANOVA, per objective)"},
        "barmode": "group",
        "xaxis": {"title": {"text": "importance"}},
        "height": 420,
    }
    return {"data": traces, "layout": layout}


def figures(data: ReportData) -> dict[str, dict[str, Any]]:
    """Plotly figure dicts by element id, rendered from the report data."""
    figs = capacity_figures(data.capacity) if data.capacity else {}
    figs |= explanation_figures(data.explained)
    figs |= {
        "pareto-tpot": _front_figure(data, "tpot_ms"),
        "pareto-ttft": _front_figure(data, "ttft_ms"),
        "parallel": _parallel_figure(data),
        "history": _history_figure(data),
    }
    if data.importance:
        figs["importance"] = _importance_figure(data)
    return figs
