"""The nouns of a capacity plan: what was asked, and per GPU kind what it takes and costs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from tuner.deployment import Deployment
from tuner.knobs.models import Strict
from tuner.plan.sizing import DEFAULT_HEADROOM
from tuner.prices import GPUPrice
from tuner.specs import (
    MAX_RATE_RPS,
    MAX_SECONDS,
    SLA,
    Engine,
    EngineConfig,
    GPUProfile,
    ModelSpec,
    SearchSpace,
    Workload,
)

__all__ = [
    "DisaggOption",
    "MAX_GPUS_PER_REPLICA",
    "MAX_HEADROOM",
    "MAX_PLAN_USERS",
    "KindPlan",
    "Option",
    "PlanRequest",
    "PlanResult",
    "Status",
]

# A plan's target is a whole service, so its users go past one load generator's MAX_USERS; the
# largest scale-up domain shipping (NVL72) is far below the replica bound.
MAX_PLAN_USERS = 100_000_000
MAX_GPUS_PER_REPLICA = 1024
MAX_HEADROOM = 10.0  # spare capacity of 10x the target: past any sizing anyone asks for

Status = Literal["ok", "no-fit", "misses-sla"]


class PlanRequest(Strict):
    """Everything a plan needs: model, SLA, the load to serve and the hardware to consider
    (Strict: finite numbers only, so `--rate inf` is one input error)."""

    model: ModelSpec
    sla: SLA
    workload: Workload = Field(description="Request lengths and count simulated per replica")
    space: SearchSpace
    # One engine per plan (searching the three would triple a plan's simulator runs): its
    # scheduling and overheads are predicted, its launch files written.
    engine: Engine = Field(default=Engine.vllm, description="The serving engine planned for")
    rate_rps: float | None = Field(
        default=None, gt=0, le=MAX_RATE_RPS, description="Target Poisson rate"
    )
    users: int | None = Field(
        default=None, ge=1, le=MAX_PLAN_USERS, description="Closed-loop users to serve"
    )
    think_time_s: float = Field(
        default=0.0, ge=0, le=MAX_SECONDS, description="Pause between a user's requests"
    )
    headroom: float = Field(default=DEFAULT_HEADROOM, ge=0, le=MAX_HEADROOM)
    max_gpus_per_replica: int = Field(default=8, ge=1, le=MAX_GPUS_PER_REPLICA)
    gpus: list[GPUProfile] = Field(min_length=1, description="GPU profiles to consider")

    @model_validator(mode="after")
    def _one_target(self) -> PlanRequest:
        if (self.rate_rps is None) == (self.users is None):
            raise ValueError("give exactly one target: a request rate or a number of users")
        return self

    def gpu(self, name: str) -> GPUProfile:
        """The requested GPU profile called `name`."""
        return next(g for g in self.gpus if g.name == name)


class Option(BaseModel):
    """One GPU kind at one tensor-parallel size, sized for the target."""

    gpu: str
    tp: int
    config: EngineConfig
    capacity_rps_per_replica: float
    target_rps: float
    replicas: int
    gpus: int
    utilisation: float = Field(description="Target load / fleet SLA capacity")
    ttft_ms: float = Field(description="TTFT at the SLA percentile at the operating load")
    tpot_ms: float = Field(description="TPOT at the SLA percentile at the operating load")
    usd_per_gpu_hour: float | None = None
    usd_per_hour: float | None = None
    usd_per_m_output_tokens: float | None = None
    usd_per_m_total_tokens: float | None = None
    energy_j_per_output_token: float | None = Field(
        description="Estimate from TDP x utilisation; None when the TDP is unknown"
    )
    max_context_tokens: int
    fit: str
    evaluations: int
    capacity_band: float = Field(
        default=0.0, ge=0, description="p90 relative error of the predicted capacity (its band)"
    )
    replicas_at_band: int = Field(
        default=0, ge=0, description="Replicas needed if capacity is lower by its band"
    )
    band_source: str = Field(default="", description="Where the band comes from")


class DisaggOption(BaseModel):
    """The disaggregated shape of one GPU kind, sized for the target like the aggregated one."""

    shape: str
    deployment: Deployment
    capacity_rps_per_unit: float
    units: int
    gpus: int
    usd_per_hour: float | None = None
    ttft_ms: float = Field(description="TTFT at the SLA percentile at the unit's capacity")
    tpot_ms: float = Field(description="TPOT at the SLA percentile at the unit's capacity")
    binding: str
    cheaper: bool = Field(description="Fewer dollars (or GPUs, unpriced) than the aggregated plan")


class KindPlan(BaseModel):
    """What one GPU kind needs: its cheapest option, or why it cannot serve the load."""

    gpu: str
    display_name: str
    status: Status
    reason: str | None = None
    best: Option | None = None
    options: list[Option] = Field(default_factory=list)
    price: GPUPrice | None = None
    # The disaggregated shape of the same weights (tuner.plan.disagg_option), or why none.
    disaggregated: DisaggOption | str | None = Field(default=None, exclude_if=lambda v: v is None)


class PlanResult(BaseModel):
    """A ranked plan: cheapest GPU kind meeting the SLA first."""

    request: PlanRequest
    kinds: list[KindPlan]
    cheapest: str | None
    missing_prices: list[str]
    elapsed_s: float = 0.0

    @property
    def ok(self) -> list[KindPlan]:
        """Kinds that meet the SLA, in rank order."""
        return [k for k in self.kinds if k.status == "ok"]
