"""What a calibrated device profile carries besides its datasheet numbers (pydantic schema).

`tuner calibrate` measures the local device and writes a GPUProfile YAML whose `calibration`
block holds the fitted efficiency constants, the fit's residuals, the grid the measurements
covered (predictions outside it get wider error bands) and, when measured, the speculative
acceptance per draft position. Every command that takes `--gpu` accepts such a file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tuner.knobs.models import Strict

__all__ = ["AcceptanceCurve", "Calibration", "CalibrationGrid", "Residual"]


class Residual(Strict):
    """How far the fitted model is from the measurements of one quantity (relative errors)."""

    median_abs_rel_error: float = Field(ge=0, description="Median |predicted/measured - 1|")
    p90_abs_rel_error: float = Field(ge=0, description="90th percentile of the same")
    count: int = Field(ge=1, description="Measurements behind these figures")


class CalibrationGrid(Strict):
    """The ranges the calibration measured; inside them the residuals hold as measured."""

    batch: tuple[int, int] = Field(description="Decoding sequences per step, min and max")
    context: tuple[int, int] = Field(description="Context tokens per sequence, min and max")
    chunk: tuple[int, int] = Field(description="Prompt tokens per prefill step, min and max")

    @model_validator(mode="after")
    def _ordered(self) -> CalibrationGrid:
        for name in ("batch", "context", "chunk"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"grid.{name} must be [min, max] with 0 <= min <= max")
        return self


class AcceptanceCurve(Strict):
    """Measured speculative acceptance: P(position i accepted | positions before it were)."""

    draft: str = Field(description="What proposed: a draft model's name, or 'ngram'")
    per_position: list[float] = Field(min_length=1, description="Conditional acceptance per slot")
    prompts: str = Field(description="The prompt set measured on")
    tokens_measured: int = Field(ge=1)

    @model_validator(mode="after")
    def _probabilities(self) -> AcceptanceCurve:
        if any(not 0 <= a <= 1 for a in self.per_position):
            raise ValueError("acceptance per position must lie in [0, 1]")
        return self


class Calibration(Strict):
    """Fitted efficiency constants of one device, with the evidence for them."""

    backend: Literal["torch", "vllm"] = Field(description="What was measured")
    model: str = Field(description="Model the engine step times were measured with")
    measured_at: str = Field(description="UTC time of the measurement, ISO 8601")
    host: str = Field(description="Where: CPU/GPU name and core count")
    efficiency: dict[str, float] = Field(
        description="Fitted tuner.perf.efficiency.Efficiency fields; the others keep defaults"
    )
    residuals: dict[str, Residual] = Field(
        description="Fit error per quantity: 'ttft', 'tpot' (and step kinds measured)"
    )
    grid: CalibrationGrid
    acceptance: list[AcceptanceCurve] = Field(default_factory=list)
    refits: int = Field(default=0, ge=0, description="Times confirmed measurements refitted it")
