"""The tune report's page: the summary, the inputs, the Pareto table and the figures, laid out
from a ReportData (tuner.report.data) in the shared page shell."""

from __future__ import annotations

import html

from tuner.report.answer import answer_html, sensitivity_table_html
from tuner.report.data import Point, ReportData
from tuner.report.deployments import deployments_html
from tuner.report.figures import figures
from tuner.report.page import page_html
from tuner.search.trials import KNOBS as KNOB_COLUMNS

__all__ = ["render_html"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f3f3f3} tr.recommended td{background:#fff3b0;font-weight:bold}
.ok{background:#eef8ee;padding:8px}.fail{background:#fdeaea;padding:8px}
.inputs td{text-align:left} .plot{margin:16px 0} #js-errors{color:#b00}
.card{border:1px solid #9c9;border-radius:6px} .card ul{margin:4px 0}
.binding{background:#fff8e0;padding:6px;margin:4px 0}
.pareto td:last-child{text-align:left;max-width:420px} .sensitivity td:first-child{text-align:left}
"""


def _pm(p: Point, quantity: str) -> str:
    """The error band of a predicted quantity as ` +- N%`, or nothing when it has none."""
    return f" +- {p.band_pct[quantity]:.0f}%" if quantity in p.band_pct else ""


def _table(data: ReportData) -> str:
    """The Pareto set, one row per front variant, the recommended one highlighted."""
    by_number = {p.number: p for p in data.points}
    pct = data.percentile
    head = [
        "trial",
        *KNOB_COLUMNS,
        f"TTFT P{pct} ms",
        f"TPOT P{pct} ms",
        "tok/s/GPU",
        "capacity tok/s/GPU",
        "binding limit",
    ]
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for n in data.front:
        p = by_number[n]
        cls = ' class="recommended"' if p.recommended else ""
        cells = [
            str(n),
            *(str(p.knobs[k]) for k in KNOB_COLUMNS),
            f"{p.ttft_ms:.1f}{_pm(p, 'ttft')}",
            f"{p.tpot_ms:.2f}{_pm(p, 'tpot')}",
            f"{p.tput_per_gpu:.0f}{_pm(p, 'throughput')}",
            "" if p.capacity_tok_s_per_gpu is None else f"{p.capacity_tok_s_per_gpu:.0f}",
            p.binding,
        ]
        rows.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return '<table class="pareto">' + "".join(rows) + "</table>"


def _summary(data: ReportData) -> str:
    """The recommendation with its numbers, or the closest variants when nothing met the SLA."""
    if data.recommended is None:
        items = "".join(f"<li>{html.escape(c)}</li>" for c in data.closest)
        return (
            '<p class="fail"><b>No variant met the SLA; nothing is recommended.</b></p>'
            f"<p>Closest variants:</p><ul>{items}</ul>"
        )
    p = next(p for p in data.points if p.number == data.recommended)
    room = "" if data.headroom_met else " (meets the SLA but without the headroom margin)"
    knobs = ", ".join(f"{k}={v}" for k, v in p.knobs.items())
    return (
        f'<p class="ok"><b>Recommended: trial {p.number}</b>{room}: {html.escape(knobs)}; '
        f"TTFT P{data.percentile} {p.ttft_ms:.1f} ms{_pm(p, 'ttft')}, TPOT P{data.percentile} "
        f"{p.tpot_ms:.2f} ms{_pm(p, 'tpot')}, {p.tput_per_gpu:.0f}{_pm(p, 'throughput')} output "
        f"tokens/s per GPU{' (+- the error band of the prediction)' if p.band_pct else ''}.</p>"
    )


# Figures that belong to the answer: drawn right after the recommendation card, in this order.
_ANSWER_FIGURES = ("frontier", "sensitivity", "sla-cost")


def render_html(data: ReportData) -> str:
    """A self-contained HTML page (plotly.js embedded) rendering `data`: the answer first (the
    card with the binding limit, the frontier, knob sensitivity, the SLA-cost curve), then the
    other figures, then the long tables."""
    inputs = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in data.inputs.items()
    )
    counts = ", ".join(f"{v} {k}" for k, v in data.counts.items())
    pruned = "; ".join(f"{k}: {v}" for k, v in sorted(data.pruned_reasons.items()))
    pruned_text = f" Pruned before evaluation: {html.escape(pruned)}" if pruned else ""
    head = answer_html(data.answer) if data.answer else _summary(data)
    head += deployments_html(data.deployments, data.percentile)
    workload = html.escape(data.inputs.get("workload", ""))
    body = f"""{head}
<p><b>Workload.</b> {workload}</p>
<p><b>Recommendation rule.</b> {html.escape(data.rule)}</p>"""
    after = f"""<h2>Inputs</h2><table class="inputs">{inputs}</table>
<p>Trials: {html.escape(counts)}.{pruned_text}</p>
<h2>Pareto set</h2>{_table(data)}
{sensitivity_table_html(data.explained.sensitivity)}"""
    figs = figures(data)
    ordered = {k: figs[k] for k in _ANSWER_FIGURES if k in figs}
    ordered |= {k: v for k, v in figs.items() if k not in ordered}
    return page_html(data.title, body, ordered, _CSS, after=after)
