"""What the SLA costs: the recommended variant's capacity as each SLA bound is tightened, loosened.

A user who asks for TPOT 25 ms instead of 50 learns, before buying anything, how many more GPUs
the stricter bound needs (capacity at the asked SLA / capacity at the scaled one) and, with a GPU
price, what a million output tokens then cost. Each bound is scaled alone, then both together;
the point at scale 1 is the SLA asked for, computed once. Every point is the simulator's
capacity search (at the SLA itself, no headroom), the quantity that ranks variants.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tuner.backends import evaluate_capacity
from tuner.backends.sim import SimBackend
from tuner.perf.load import LoadMode
from tuner.prices import PriceTable, load_prices
from tuner.result_io import write_atomic
from tuner.specs import SLA, Context, EngineConfig

__all__ = [
    "SLA_COST_COLUMNS",
    "SLA_SCALES",
    "SLACostPoint",
    "read_sla_cost_csv",
    "sla_cost_curve",
    "sla_cost_text",
    "write_sla_cost_csv",
]

# Each bound times these: four times as strict to twice as loose (a pick whose bounds are slack
# at 0.5x still shows where a stricter SLA starts to cost).
SLA_SCALES = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
# The load the GPU count is sized for (req/s): a round figure the user scales in their head.
REFERENCE_RPS = 100.0
Scaled = Literal["ttft", "tpot", "both"]

SLA_COST_COLUMNS = (
    "bound",
    "scale",
    "ttft_ms",
    "tpot_ms",
    "percentile",
    "capacity_rps_per_gpu",
    "output_tok_s_per_gpu",
    "gpus_per_100_rps",
    "cost_vs_sla",
    "usd_per_million_output_tokens",
)


class SLACostPoint(BaseModel):
    """The recommended variant's capacity under one scaled SLA."""

    bound: Scaled = Field(description="Which bounds were scaled")
    scale: float
    ttft_ms: float | None
    tpot_ms: float | None
    percentile: int
    capacity_rps_per_gpu: float = Field(description="0 when no load meets the scaled SLA")
    output_tok_s_per_gpu: float
    gpus_per_100_rps: int | None = Field(description="GPUs that serve 100 req/s at this SLA")
    cost_vs_sla: float | None = Field(description="GPUs needed relative to the SLA asked for")
    usd_per_million_output_tokens: float | None = Field(description="None: no price, no capacity")


def _scaled(sla: SLA, bound: Scaled, scale: float) -> SLA:
    def by(name: str, value: float | None) -> float | None:
        scaled = value is not None and bound in (name, "both")
        return value * scale if scaled and value is not None else value

    return sla.model_copy(
        update={"ttft_ms": by("ttft", sla.ttft_ms), "tpot_ms": by("tpot", sla.tpot_ms)}
    )


def _point(
    config: EngineConfig,
    ctx: Context,
    mode: LoadMode,
    bound: Scaled,
    scale: float,
    usd_per_hour: float | None,
) -> SLACostPoint:
    sla = _scaled(ctx.sla, bound, scale)
    cap, metrics = evaluate_capacity(
        SimBackend(), config, ctx.model_copy(update={"sla": sla}), mode=mode
    )
    rps = cap.rps_per_gpu if metrics.feasible else 0.0
    tok_s = cap.tok_s_per_gpu if metrics.feasible else 0.0
    usd = None
    if usd_per_hour is not None and tok_s > 0:
        usd = usd_per_hour / (tok_s * 3600.0) * 1e6
    return SLACostPoint(
        bound=bound,
        scale=scale,
        ttft_ms=sla.ttft_ms,
        tpot_ms=sla.tpot_ms,
        percentile=sla.percentile,
        capacity_rps_per_gpu=rps,
        output_tok_s_per_gpu=tok_s,
        gpus_per_100_rps=math.ceil(REFERENCE_RPS / rps) if rps > 0 else None,
        cost_vs_sla=None,
        usd_per_million_output_tokens=usd,
    )


def sla_cost_curve(
    config: EngineConfig,
    ctx: Context,
    mode: LoadMode = "rate",
    scales: tuple[float, ...] = SLA_SCALES,
    prices: PriceTable | None = None,
) -> list[SLACostPoint]:
    """Capacity of `config` with each SLA bound (then both) scaled by each of `scales`."""
    price = (prices if prices is not None else load_prices()).get(ctx.gpu.name)
    usd = price.usd_per_gpu_hour if price else None
    named: tuple[tuple[Scaled, float | None], ...] = (
        ("ttft", ctx.sla.ttft_ms),
        ("tpot", ctx.sla.tpot_ms),
    )
    bounds: list[Scaled] = [b for b, v in named if v is not None]
    if len(bounds) == 2:
        bounds.append("both")
    first: Scaled = bounds[0] if bounds else "both"
    base = _point(config, ctx, mode, first, 1.0, usd)
    points = [base]
    for bound in bounds:
        for scale in scales:
            if scale == 1.0:
                if bound != first:
                    points.append(base.model_copy(update={"bound": bound}))
                continue
            points.append(_point(config, ctx, mode, bound, scale, usd))
    ref = base.capacity_rps_per_gpu
    for p in points:
        if ref > 0 and p.capacity_rps_per_gpu > 0:
            p.cost_vs_sla = ref / p.capacity_rps_per_gpu
    return sorted(points, key=lambda p: (("ttft", "tpot", "both").index(p.bound), p.scale))


def _bound_text(p: SLACostPoint) -> str:
    if p.bound == "both":
        return f"both bounds x{p.scale:g}"
    value = p.ttft_ms if p.bound == "ttft" else p.tpot_ms
    return f"{p.bound.upper()} {value:g} ms (x{p.scale:g})"


def sla_cost_text(points: list[SLACostPoint]) -> list[str]:
    """Short lines: the tightest and the loosest scale of each single bound, with the GPUs."""
    lines = []
    for bound in ("ttft", "tpot"):
        pts = sorted((p for p in points if p.bound == bound), key=lambda p: p.scale)
        for p in (pts[0], pts[-1]) if len(pts) > 1 else ():
            gpus = f"{p.cost_vs_sla:.2f}x the GPUs" if p.cost_vs_sla else "no load meets it"
            lines.append(f"{_bound_text(p)}: {p.capacity_rps_per_gpu:.2f} req/s per GPU, {gpus}")
    return lines


def _cell(value: float | int | None) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.4g}"


def write_sla_cost_csv(points: list[SLACostPoint], path: Path) -> None:
    """sla_cost.csv: one row per (bound, scale)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(SLA_COST_COLUMNS)
    for p in points:
        row = p.model_dump()
        writer.writerow([row["bound"], *(_cell(row[c]) for c in SLA_COST_COLUMNS[1:])])
    write_atomic(path, buf.getvalue())


def read_sla_cost_csv(path: Path) -> list[SLACostPoint]:
    """The rows of an sla_cost.csv back as SLACostPoints."""
    with path.open(newline="") as f:
        return [
            SLACostPoint.model_validate({k: (v if v != "" else None) for k, v in row.items()})
            for row in csv.DictReader(f)
        ]
