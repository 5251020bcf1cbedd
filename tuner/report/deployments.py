"""The report's "aggregated or disaggregated" section: each searched deployment's pools,
their utilisation at capacity, the KV hand-off and what binds (from deployments.yaml's data)."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["deployments_html"]


def _row(o: dict[str, Any], pct: int) -> str:
    nan = float("nan")
    busy = (o.get("prefill_pool_utilisation", 0.0), o.get("decode_pool_utilisation", 0.0))
    latency = (o.get(f"ttft_ms_p{pct}", nan), o.get(f"tpot_ms_p{pct}", nan))
    cells = [
        str(o["shape"]),
        str(o["gpus"]),
        f"{o['capacity_rps_per_gpu']:.3f}",
        f"{busy[0]:.0%} / {busy[1]:.0%}",
        f"{latency[0]:.0f} / {latency[1]:.1f}",
        f"{o.get('handoff_ms_p50', float('nan')):.2f} ms over {o.get('handoff_link', '-')}",
        str(o["binding"]),
    ]
    return "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"


def deployments_html(doc: dict[str, Any] | None, pct: int) -> str:
    """The section, or nothing when the run did not compare deployments."""
    if not doc:
        return ""
    agg = doc["aggregated_capacity_rps_per_gpu"]
    if doc["recommended"] == "disaggregated":
        top = doc["options"][0]
        verdict = (
            f"<b>Disaggregated serving is recommended</b>: {html.escape(str(top['shape']))} "
            f"serves {top['capacity_rps_per_gpu']:.3f} req/s per GPU at the SLA against "
            f"{agg:.3f} for the aggregated recommendation."
        )
    else:
        verdict = f"Aggregated replicas stay recommended ({agg:.3f} req/s per GPU at the SLA)."
    skipped = f" {html.escape(str(doc['skipped']))}" if doc.get("skipped") else ""
    head = ["deployment", "GPUs", "req/s per GPU", "prefill / decode busy",
            f"TTFT / TPOT P{pct} ms", "KV hand-off P50", "binding limit"]  # fmt: skip
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    rows += [_row(o, pct) for o in doc["options"]]
    return (
        "<h2>Aggregated or disaggregated</h2>"
        f"<p>{verdict}{skipped}</p>"
        f'<table class="pareto">{"".join(rows)}</table>'
    )
