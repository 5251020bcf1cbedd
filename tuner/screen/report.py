"""The report of a screened tune: the measured recommendation, the confirmed variants'
table, and parity charts of predicted against measured (capacity, TTFT, TPOT) with the y = x
line. Self-contained like the tune report (plotly.js embedded); the screen's own report is
RUN/screen/report.html."""

from __future__ import annotations

import html
from typing import Any

from tuner.report.page import page_html
from tuner.screen.variant import ConfirmedVariant

__all__ = ["parity_figures", "render_confirm_html"]

_COLORS = {"baseline": "#d62728", "candidate": "#1f77b4"}
# One point of a parity chart: the variant, its measured (x) and its predicted (y) value.
Pair = tuple[ConfirmedVariant, float, float]


def _pairs(variants: list[ConfirmedVariant], field: str) -> list[Pair]:
    out = []
    for v in variants:
        if v.predicted is None or v.measured is None:
            continue
        p, m = getattr(v.predicted, field), getattr(v.measured, field)
        if p is not None and m is not None and (field.endswith("_ms") or m > 0):
            out.append((v, float(m), float(p)))
    return out


def _trace(name: str, pairs: list[Pair], symbol: str) -> dict[str, Any]:
    return {
        "type": "scatter",
        "mode": "markers+text",
        "name": name,
        "x": [m for _, m, _ in pairs],
        "y": [p for _, _, p in pairs],
        "text": [v.label for v, _, _ in pairs],
        "textposition": "top center",
        "marker": {"size": 12, "symbol": symbol, "color": [_COLORS[v.role] for v, _, _ in pairs]},
        "hovertemplate": "%{text}<br>measured %{x:.4g}<br>predicted %{y:.4g}<extra></extra>",
    }


def _parity(title: str, traces: list[dict[str, Any]], unit: str, log: bool) -> dict[str, Any]:
    values = [x for t in traces for x in (*t["x"], *t["y"]) if x > 0]
    lo, hi = (min(values), max(values)) if values else (1.0, 10.0)
    lo, hi = lo / 1.5, hi * 1.5
    diagonal = {
        "type": "scatter",
        "mode": "lines",
        "name": "y = x (exact)",
        "x": [lo, hi],
        "y": [lo, hi],
        "line": {"dash": "dash", "color": "#555"},
        "hoverinfo": "skip",
    }
    axis = {"type": "log" if log else "linear"}
    layout = {
        "title": {"text": title},
        "height": 440,
        "xaxis": {**axis, "title": {"text": f"measured ({unit})"}},
        "yaxis": {**axis, "title": {"text": f"predicted ({unit})"}},
    }
    return {"data": [diagonal, *traces], "layout": layout}


def parity_figures(variants: list[ConfirmedVariant], pct: int) -> dict[str, dict[str, Any]]:
    """Figure id -> Plotly figure dict: capacity parity, and TTFT/TPOT parity (log axes)."""
    capacity = [_trace("capacity", _pairs(variants, "capacity_tok_s_per_gpu"), "circle")]
    latency = [
        _trace(f"TTFT P{pct}", _pairs(variants, "ttft_ms"), "circle"),
        _trace(f"TPOT P{pct}", _pairs(variants, "tpot_ms"), "diamond"),
    ]
    return {
        "parity-capacity": _parity(
            "Capacity: predicted vs measured",
            capacity,
            "output tok/s per GPU at the SLA",
            log=False,
        ),
        "parity-latency": _parity(
            "Latency at the compared load: predicted vs measured", latency, "ms", log=True
        ),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = list(rows[0]) if rows else []
    out = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cls = ' class="recommended"' if row.get("recommended") is True else ""
        cells = "".join(f"<td>{html.escape(str(row[h]))}</td>" for h in head)
        out.append(f"<tr{cls}>{cells}</tr>")
    return '<table class="confirm">' + "".join(out) + "</table>"


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f3f3f3} tr.recommended td{background:#fff3b0;font-weight:bold}
.ok{background:#eef8ee;padding:8px}.fail{background:#fdeaea;padding:8px}
.plot{margin:16px 0;max-width:900px} #js-errors{color:#b00}
"""


def render_confirm_html(
    title: str,
    lines: list[str],
    rows: list[dict[str, Any]],
    figs: dict[str, dict[str, Any]],
    ok: bool,
) -> str:
    """The self-contained page: summary lines, the confirmed variants' table, parity charts."""
    summary = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    body = f"""<div class="{"ok" if ok else "fail"}">{summary}</div>
<p>The simulator's screen of the whole space: <a href="screen/report.html">screen/report.html</a>.
</p>
<h2>Confirmed variants: predicted vs measured</h2>{_table(rows)}
<h2>Parity</h2>"""
    return page_html(title, body, figs, _CSS)
