"""A variant a screened tune measures: its knobs, the simulator's prediction and the
measurement, each side at the SLA percentile."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tuner.perf.load import Capacity
from tuner.specs import EngineConfig, Metrics

__all__ = ["ConfirmedVariant", "Side", "config_key"]


class Side(BaseModel):
    """One side (predicted or measured) of a confirmed variant, at the SLA percentile."""

    model_config = ConfigDict(extra="forbid")

    capacity_load: float | None = Field(description="Highest load meeting the SLA (None: none)")
    capacity_rps_per_gpu: float
    capacity_tok_s_per_gpu: float
    ttft_ms: float | None = Field(description="At the compared load")
    tpot_ms: float | None = Field(description="At the compared load")


class ConfirmedVariant(BaseModel):
    """A variant the real backend was asked to measure, with the simulator's prediction."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["baseline", "candidate"]
    predicted_rank: int | None = Field(
        description="Rank on the predicted front (1 = best) of the round that picked it"
    )
    screen_trial: int | None = Field(description="Trial number in RUN/screen")
    round: int = Field(
        default=1,
        exclude_if=lambda v: v == 1,  # files written before the field read back equal
        ge=1,
        description="Round of measurement that picked it: 1 from the screen, later ones from the "
        "screen re-ranked by the simulator refitted to the measurements before it",
    )
    config: EngineConfig
    status: Literal["measured", "infeasible", "skipped"] = "skipped"
    reason: str | None = None
    compared_load: float | None = Field(
        default=None,
        description="The load both sides are compared at: the measured capacity load, else the "
        "lightest load probed",
    )
    predicted: Side | None = None
    measured: Side | None = None
    capacity: Capacity | None = None
    metrics: Metrics | None = None
    wall_s: float = 0.0
    restored: bool = Field(
        default=False,
        exclude=True,
        description="Measured by an earlier, interrupted run of this folder",
    )

    @property
    def label(self) -> str:
        """The variant in a few words: 'engine defaults', 'rank N' (on the screen's predicted
        front) or 'round R rank N' (on the front re-ranked for round R)."""
        if self.role == "baseline":
            return "engine defaults"
        rank = f"rank {self.predicted_rank}"
        return rank if self.round == 1 else f"round {self.round} {rank}"

    @property
    def meets_sla(self) -> bool:
        """Whether the measurement found a load meeting the SLA."""
        return (
            self.status == "measured"
            and self.capacity is not None
            and (self.capacity.at_sla is not None)
        )

    def rel_error(self, field: str) -> float | None:
        """predicted / measured - 1 of a Side field (None when either side lacks it)."""
        if self.predicted is None or self.measured is None:
            return None
        p, m = getattr(self.predicted, field), getattr(self.measured, field)
        if p is None or m is None or m == 0:
            return None
        return float(p / m - 1.0)


def config_key(config: EngineConfig) -> str:
    """A variant's knobs as one canonical string (what makes two variants the same)."""
    return json.dumps(config.model_dump(mode="json"), sort_keys=True)
