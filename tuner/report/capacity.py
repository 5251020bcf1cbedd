"""Capacity-mode report figures: the latency-throughput frontier and latency-vs-load curves.

Data first (`CapacityReport`, built from the records), then plain Plotly figure dicts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tuner.perf.load import load_unit, probe_at
from tuner.report.shapes import SLA_LINE, hline
from tuner.search.pareto import ParetoResult
from tuner.search.trials import TrialRecord
from tuner.specs import SLA

__all__ = ["CapacityReport", "Curve", "capacity_figures", "capacity_report"]

# Latency-vs-load curves drawn: the front variants with the highest goodput.
MAX_CURVES = 8


class Curve(BaseModel):
    """One variant's probed ladder: load, and latency/throughput at the SLA percentile."""

    trial: int
    label: str
    load: list[float]
    ttft_ms: list[float]
    tpot_ms: list[float]
    tok_s_per_gpu: list[float]


class CapacityReport(BaseModel):
    """What the capacity figures show."""

    load_unit: str
    percentile: int
    ttft_bound_ms: float | None
    tpot_bound_ms: float | None
    front_tok_s: list[float]
    front_user_tok_s: list[float]  # per-user output speed, 1000 / TPOT
    front_text: list[str]
    # Error bars of the frontier points (absolute): tok/s/GPU +-, per-user tok/s - and +.
    front_err: list[tuple[float, float, float]] = []
    recommended: tuple[float, float] | None  # (tok/s/GPU, per-user tok/s) of the operating point
    curves: list[Curve]


def capacity_report(records: list[TrialRecord], result: ParetoResult, sla: SLA) -> CapacityReport:
    """The frontier points, the recommended operating point and the front variants' ladders."""
    pct = sla.percentile
    by_number = {r.number: r for r in records}
    rec_point = None
    rec = by_number.get(result.recommended) if result.recommended is not None else None
    if rec is not None and rec.capacity is not None:
        op = rec.capacity.operating or rec.capacity.at_sla
        if op is not None:
            rec_point = (op.output_tokens_per_s_per_gpu, 1e3 / op.tpot_ms.at(pct))
    curves = []
    for n in result.front[:MAX_CURVES]:
        cap = by_number[n].capacity
        if cap is None:
            continue
        pts = sorted(cap.points, key=lambda p: p.load)
        curves.append(
            Curve(
                trial=n,
                label=f"trial {n}",
                load=[p.load for p in pts],
                ttft_ms=[p.ttft_ms.at(pct) for p in pts],
                tpot_ms=[p.tpot_ms.at(pct) for p in pts],
                tok_s_per_gpu=[p.output_tokens_per_s_per_gpu for p in pts],
            )
        )
    mode = result.frontier[0].mode if result.frontier else "rate"
    err = [
        _error_bar(
            by_number[q.trial], q.load, q.output_tokens_per_s_per_gpu, q.tokens_per_s_per_user
        )
        for q in result.frontier
    ]
    return CapacityReport(
        load_unit=load_unit(mode),
        percentile=pct,
        ttft_bound_ms=sla.ttft_ms,
        tpot_bound_ms=sla.tpot_ms,
        front_tok_s=[q.output_tokens_per_s_per_gpu for q in result.frontier],
        front_user_tok_s=[q.tokens_per_s_per_user for q in result.frontier],
        front_text=[
            f"trial {q.trial} at {q.load:.2f} {load_unit(q.mode)}; stands for "
            f"{len(q.variants)} variant(s)"
            for q in result.frontier
        ],
        recommended=rec_point,
        curves=curves,
        front_err=err if all(e is not None for e in err) else [],
    )


def _error_bar(
    r: TrialRecord, load: float, tok_s: float, user_tok_s: float
) -> tuple[float, float, float] | None:
    """The band of the probe at `load` as error bars: throughput +-, and per-user speed (1000 /
    TPOT) down to 1/(1 + b) and up to 1/(1 - b) of itself (b capped at 0.9)."""
    probe = probe_at(r.capacity, load)
    if probe is None or probe.band is None:
        return None
    b = min(probe.band.tpot, 0.9)
    return tok_s * probe.band.throughput, user_tok_s * b / (1 + b), user_tok_s * b / (1 - b)


def _frontier_figure(c: CapacityReport) -> dict[str, Any]:
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "markers+lines",
            "name": "frontier (variant, load)",
            "x": c.front_tok_s,
            "y": c.front_user_tok_s,
            "text": c.front_text,
            "hovertemplate": "%{text}<br>%{x:.0f} tok/s/GPU, %{y:.1f} tok/s per user"
            "<extra></extra>",
            "line": {"shape": "hv"},
        }
    ]
    if c.front_err:  # the prediction's error band (tuner.perf.bands), faint so the front reads
        bar = {"type": "data", "visible": True, "color": "rgba(31,119,180,0.35)", "thickness": 1}
        traces[0]["error_x"] = bar | {"array": [e[0] for e in c.front_err]}
        traces[0]["error_y"] = bar | {
            "symmetric": False,
            "array": [e[2] for e in c.front_err],
            "arrayminus": [e[1] for e in c.front_err],
        }
    if c.recommended:
        traces.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": "recommended",
                "x": [c.recommended[0]],
                "y": [c.recommended[1]],
                "text": ["recommended"],
                "textposition": "top center",
                "marker": {"symbol": "star", "size": 20, "color": "gold"},
            }
        )
    shapes = []
    if c.tpot_bound_ms:
        y = 1e3 / c.tpot_bound_ms
        shapes.append(hline(y, SLA_LINE))
    return {
        "data": traces,
        "layout": {
            "title": {
                "text": f"Latency-throughput frontier (P{c.percentile}); dashed: SLA TPOT"
                + ("; bars: error band" if c.front_err else "")
            },
            "xaxis": {"title": {"text": "output tokens/s per GPU"}},
            "yaxis": {"title": {"text": f"per-user output tok/s (1000 / TPOT P{c.percentile})"}},
            "shapes": shapes,
            "height": 480,
        },
    }


def _load_figure(c: CapacityReport, metric: str) -> dict[str, Any]:
    label = "TTFT" if metric == "ttft_ms" else "TPOT"
    bound = c.ttft_bound_ms if metric == "ttft_ms" else c.tpot_bound_ms
    traces = [
        {
            "type": "scatter",
            "mode": "markers+lines",
            "name": cv.label,
            "x": cv.load,
            "y": getattr(cv, metric),
        }
        for cv in c.curves
    ]
    shapes = []
    if bound is not None:
        shapes.append(hline(bound, SLA_LINE))
    return {
        "data": traces,
        "layout": {
            "title": {"text": f"{label} P{c.percentile} vs load (front variants); dashed: SLA"},
            "xaxis": {"title": {"text": f"offered load ({c.load_unit} per replica)"}},
            "yaxis": {"title": {"text": f"{label} P{c.percentile} (ms)"}},
            "shapes": shapes,
            "height": 420,
        },
    }


def capacity_figures(c: CapacityReport) -> dict[str, dict[str, Any]]:
    """Plotly figure dicts by element id."""
    return {
        "frontier": _frontier_figure(c),
        "load-ttft": _load_figure(c, "ttft_ms"),
        "load-tpot": _load_figure(c, "tpot_ms"),
    }
