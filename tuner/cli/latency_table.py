"""The latency table `predict` prints: percentiles per quantity, with the error band."""

from __future__ import annotations

from rich.table import Table

from tuner.specs import Metrics

__all__ = ["band_text", "latency_table"]


def band_text(m: Metrics, quantity: str) -> str:
    """' +- 12%' when the prediction carries an error band for `quantity` (sim only)."""
    band = m.extra.get(f"{quantity}_band_pct")
    return f" +- {band:.0f}%" if isinstance(band, float | int) else ""


def latency_table(m: Metrics, title: str) -> Table:
    """TTFT, TPOT, ITL, E2E and queue percentiles of one prediction or measurement."""
    t = Table(title=title)
    t.add_column("latency (ms)")
    banded = "ttft_band_pct" in m.extra
    for col in ("mean", "P50", "P90", "P95", "P99", *(("band",) if banded else ())):
        t.add_column(col, justify="right")
    # ITL is the decode step the TPOT band describes; the queue time has no validation rows.
    for label, p, q in (
        ("TTFT", m.ttft_ms, "ttft"),
        ("TPOT", m.tpot_ms, "tpot"),
        ("ITL", m.itl_ms, "tpot"),
        ("E2E", m.e2e_ms, "e2e"),
        ("queue", m.queue_ms, ""),
    ):
        band = (band_text(m, q).strip() or "-",) if banded else ()
        t.add_row(label, *(f"{v:.2f}" for v in (p.mean, p.p50, p.p90, p.p95, p.p99)), *band)
    return t
