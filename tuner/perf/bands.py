"""Error bands: how far a measurement may lie from the simulator's prediction (pure functions).

A band is a relative half-width `b` per predicted quantity: a prediction `p` reads `p +- b*p`.
`b` is the 90th percentile of the relative error over the measurements that back the model, so
about 9 in 10 measurements of setups like those fall inside the band. Where it comes from:

- A calibrated profile (`GPUProfile.calibration`): its fit residuals' p90, as stored
  (|predicted/measured - 1|, `tuner.calibration_schema.Residual`; for the errors of a fit it
  is close to the validation file's |measured/predicted - 1|). TTFT takes the 'ttft'
  residual (else 'prefill_step'), TPOT the 'tpot' residual (else 'decode_step'); throughput and
  capacity take TPOT's, since decode steps set the rate at load; E2E takes the larger of TTFT's
  and TPOT's, since E2E is a sum of the two parts and its relative error cannot exceed the
  larger part's. A quantity without a residual falls back to the validation figure. Outside the
  calibrated grid the band is multiplied, per dimension (batch, context, chunk), by
  1 + log2(r), where r > 1 is how many times the point lies beyond the grid's edge; inside, 1.
- Otherwise: the validation file shipped with the package (`tuner/data/validation_bands.json`,
  written by `python benchmarks/accuracy.py --write-bands` from the public validation rows):
  the p90 of |measured/predicted - 1| per quantity, each from the rows its `basis` names. The
  public rows state means (and offline throughput); the band is applied to every percentile of
  the quantity as is, since no public source states percentiles for the same setups.

The SLA rule (`meets_banded`): a latency meets a bound with its band when predicted x (1 + b)
<= bound, i.e. the measurement can be b above the prediction and still meet the SLA.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from tuner.calibration_schema import CalibrationGrid
from tuner.sla import meets_sla
from tuner.specs import SLA, EngineConfig, GPUProfile, Metrics, Workload

__all__ = [
    "QUANTITIES",
    "Band",
    "GridPoint",
    "QuantityError",
    "ValidationBands",
    "band_columns",
    "band_for",
    "grid_point",
    "meets_banded",
    "validation_bands",
    "widening",
]

QUANTITIES = ("ttft", "tpot", "e2e", "throughput")
VALIDATION_FILE = "validation_bands.json"
# Residual keys each quantity reads, first found wins (step kinds when the end-to-end is absent).
_RESIDUAL_KEYS = {
    "ttft": ("ttft", "prefill_step"),
    "tpot": ("tpot", "decode_step"),
    "throughput": ("tpot", "decode_step"),
}
_SOURCES = {
    "validation": "public validation rows (p90 error)",
    "calibration": "calibration residuals (p90 error)",
}


class QuantityError(BaseModel):
    """The validation error of one quantity: |measured/predicted - 1| over `rows` rows."""

    model_config = ConfigDict(extra="forbid")

    median_abs_rel_error: float = Field(ge=0)
    p90_abs_rel_error: float = Field(ge=0)
    rows: int = Field(ge=1)
    basis: str = Field(description="Which validation rows the figure is computed from")


class ValidationBands(BaseModel):
    """The shipped validation figures (schema of tuner/data/validation_bands.json)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    command: str = Field(description="The command that wrote the file")
    generated_at: str = Field(description="UTC date, ISO 8601")
    quantities: dict[str, QuantityError]


class Band(BaseModel):
    """Relative half-widths of one prediction's quantities and where they come from."""

    model_config = ConfigDict(extra="forbid")

    ttft: float = Field(ge=0)
    tpot: float = Field(ge=0)
    e2e: float = Field(ge=0)
    throughput: float = Field(ge=0, description="Output tok/s and capacity")
    source: Literal["calibration", "validation"]
    widening: float = Field(default=1.0, ge=1, description="Factor for leaving the grid")
    outside: list[str] = Field(default_factory=list, description="Grid dimensions left")

    def rule_text(self) -> str:
        """The operating point's band rule in words."""
        return f"keeps the SLA with the +{self.ttft:.0%} TTFT / +{self.tpot:.0%} TPOT band"

    @property
    def description(self) -> str:
        """Where the band comes from and, when widened, why."""
        line = _SOURCES[self.source]
        if self.widening > 1:
            line += f", {self.widening:.1f}x widened: {'; '.join(self.outside)}"
        return line

    def text(self) -> str:
        """One line naming the source and, when widened, why."""
        return f"band: {self.description}"


class GridPoint(NamedTuple):
    """Where a prediction sits in calibration-grid terms."""

    batch: float  # sequences in the engine at once (running, not queued)
    context: int  # input + output tokens per sequence
    chunk: int  # prompt tokens per prefill step


@lru_cache(maxsize=1)
def validation_bands() -> ValidationBands:
    """The validation figures shipped in the package."""
    text = resources.files("tuner").joinpath("data", VALIDATION_FILE).read_text()
    return ValidationBands.model_validate_json(text)


def grid_point(config: EngineConfig, workload: Workload, metrics: Metrics) -> GridPoint:
    """The operating point of `metrics`: running sequences by Little's law, lengths, chunk."""
    running_s = max(0.0, metrics.e2e_ms.mean - metrics.queue_ms.mean) / 1e3
    batch = min(float(config.max_num_seqs), max(1.0, metrics.requests_per_s * running_s))
    prompt = workload.input_tokens
    chunk = min(prompt, config.max_num_batched_tokens) if config.enable_chunked_prefill else prompt
    return GridPoint(batch, prompt + workload.output_tokens, chunk)


def widening(grid: CalibrationGrid, point: GridPoint) -> tuple[float, list[str]]:
    """The band factor for `point` against `grid` and a phrase per dimension outside it."""
    factor, outside = 1.0, []
    for name in GridPoint._fields:
        low, high = getattr(grid, name)
        value = max(float(getattr(point, name)), 1.0)  # a batch, a context, a chunk is >= 1
        ratio = max(value / max(high, 1), low / value)
        if ratio > 1:
            factor *= 1.0 + math.log2(ratio)
            outside.append(f"{name} {round(value, 1):g} outside calibrated {low}-{high}")
    return factor, outside


def band_for(gpu: GPUProfile, point: GridPoint | None = None) -> Band:
    """The band of a prediction on `gpu` at `point` (None: assume inside the grid)."""
    shipped = validation_bands().quantities
    cal = getattr(gpu, "calibration", None)
    if cal is None:
        values = {q: shipped[q].p90_abs_rel_error for q in QUANTITIES}
        return Band(**values, source="validation")
    factor, outside = widening(cal.grid, point) if point is not None else (1.0, [])
    values = {}
    for q, keys in _RESIDUAL_KEYS.items():
        found = next((cal.residuals[k] for k in keys if k in cal.residuals), None)
        values[q] = found.p90_abs_rel_error * factor if found else shipped[q].p90_abs_rel_error
    values["e2e"] = max(values["ttft"], values["tpot"])
    return Band(**values, source="calibration", widening=factor, outside=outside)


def meets_banded(metrics: Metrics, sla: SLA, band: Band) -> bool:
    """Whether each bounded latency, inflated by its band, still meets `sla` at its percentile."""
    return meets_sla(metrics, sla, ttft_margin=band.ttft, tpot_margin=band.tpot)


def band_columns(band: Band | None) -> dict[str, float | str]:
    """CSV / Metrics.extra fields of a band, in percent (empty strings when there is none)."""
    if band is None:
        empty: dict[str, float | str] = {f"{q}_band_pct": "" for q in QUANTITIES}
        return empty | {"band_widening": "", "band_source": ""}
    pct = {f"{q}_band_pct": round(100 * getattr(band, q), 1) for q in QUANTITIES}
    return pct | {"band_widening": round(band.widening, 3), "band_source": band.description}
