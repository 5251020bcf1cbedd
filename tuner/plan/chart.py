"""Plan charts: $/1M output tokens vs latency per GPU kind, and GPUs needed vs target load.

Data first (plain lists, testable), figures rendered from it, one self-contained HTML page.
"""

from __future__ import annotations

import html
from typing import Any

from pydantic import BaseModel

from tuner.plan.models import PlanResult
from tuner.plan.sizing import replicas_needed
from tuner.report.page import page_html
from tuner.report.shapes import vline

__all__ = ["ChartData", "chart_data", "figures", "render_html"]

# The load axis of "GPUs needed" spans 0 .. this multiple of the target.
LOAD_SPAN = 2.0
LOAD_POINTS = 41

_CSS = "body{font-family:system-ui,sans-serif;margin:24px;max-width:1100px}"


class CostPoint(BaseModel):
    """One GPU kind x TP option at the target load."""

    gpu: str
    tp: int
    tpot_ms: float
    ttft_ms: float
    usd_per_m_output_tokens: float
    gpus: int


class LoadCurve(BaseModel):
    """GPUs one kind needs (its best option) as the target load varies."""

    gpu: str
    loads_rps: list[float]
    gpus: list[int]


class ChartData(BaseModel):
    """Everything the plan charts draw."""

    title: str
    percentile: int
    tpot_bound_ms: float | None
    target_rps: float
    cost_points: list[CostPoint]
    load_curves: list[LoadCurve]


def chart_data(result: PlanResult) -> ChartData:
    """Points for the cost/latency chart (priced options) and step curves of GPUs vs load."""
    req = result.request
    points: list[CostPoint] = []
    curves: list[LoadCurve] = []
    for kind in result.ok:
        for o in kind.options:
            if o.usd_per_m_output_tokens is not None:
                points.append(
                    CostPoint(
                        gpu=o.gpu,
                        tp=o.tp,
                        tpot_ms=o.tpot_ms,
                        ttft_ms=o.ttft_ms,
                        usd_per_m_output_tokens=o.usd_per_m_output_tokens,
                        gpus=o.gpus,
                    )
                )
        best = kind.best
        assert best is not None
        loads = [LOAD_SPAN * best.target_rps * i / (LOAD_POINTS - 1) for i in range(LOAD_POINTS)]
        gpus = [
            replicas_needed(x, best.capacity_rps_per_replica, req.headroom) * best.tp for x in loads
        ]
        curves.append(LoadCurve(gpu=kind.gpu, loads_rps=loads, gpus=gpus))
    target = next((k.best.target_rps for k in result.ok if k.best), req.rate_rps or 0.0)
    return ChartData(
        title=f"Plan: {req.model.name}, SLA {req.sla.name}",
        percentile=req.sla.percentile,
        tpot_bound_ms=req.sla.tpot_ms,
        target_rps=target,
        cost_points=points,
        load_curves=curves,
    )


def _cost_figure(data: ChartData) -> dict[str, Any]:
    """$ per 1M output tokens against TPOT, one trace per GPU kind, a point per TP option."""
    pct = data.percentile
    by_gpu: dict[str, list[CostPoint]] = {}
    for p in data.cost_points:
        by_gpu.setdefault(p.gpu, []).append(p)
    traces = [
        {
            "type": "scatter",
            "mode": "markers+text",
            "name": gpu,
            "x": [p.tpot_ms for p in pts],
            "y": [p.usd_per_m_output_tokens for p in pts],
            "text": [f"tp={p.tp}" for p in pts],
            "textposition": "top center",
            "hovertext": [
                f"{gpu} tp={p.tp}: {p.gpus} GPUs, TTFT P{pct} {p.ttft_ms:.0f} ms" for p in pts
            ],
        }
        for gpu, pts in by_gpu.items()
    ]
    bound = data.tpot_bound_ms
    layout = {
        "title": {"text": f"$ per 1M output tokens vs TPOT P{pct} at the target load"},
        "xaxis": {"title": {"text": f"TPOT P{pct} (ms); dashed: SLA bound"}},
        "yaxis": {"title": {"text": "$ / 1M output tokens"}},
        "shapes": [] if bound is None else [vline(bound, {"dash": "dash"})],
    }
    return {"data": traces, "layout": layout}


def _gpus_figure(data: ChartData) -> dict[str, Any]:
    """GPUs needed against the target load, a step curve per GPU kind."""
    traces = [
        {
            "type": "scatter",
            "mode": "lines",
            "line": {"shape": "hv"},
            "name": c.gpu,
            "x": c.loads_rps,
            "y": c.gpus,
        }
        for c in data.load_curves
    ]
    layout = {
        "title": {"text": "GPUs needed vs target load (best option per GPU kind)"},
        "xaxis": {"title": {"text": "target load (req/s); dotted: the target"}},
        "yaxis": {"title": {"text": "GPUs"}},
        "shapes": [vline(data.target_rps, {"dash": "dot"})],
    }
    return {"data": traces, "layout": layout}


def figures(data: ChartData) -> dict[str, dict[str, Any]]:
    """Plotly figure dicts keyed by element id."""
    return {"cost": _cost_figure(data), "gpus": _gpus_figure(data)}


def render_html(data: ChartData, summary_lines: list[str]) -> str:
    """A self-contained HTML page (plotly.js embedded) with the plan summary and both charts."""
    summary = "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines)
    return page_html(data.title, f"<ul>{summary}</ul>", figures(data), _CSS)
