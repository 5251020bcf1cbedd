"""best.yaml's schema: a tune's recommendation (simulated, or measured by a screened tune)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from tuner.perf.load import LoadMode
from tuner.result_io import Upgrade, read_result
from tuner.search.pareto import Miss
from tuner.specs import SLA, EngineConfig

__all__ = [
    "BEST_SCHEMA_VERSION",
    "BatchLimits",
    "BestFile",
    "BindingBlock",
    "CapacityFields",
    "ExportPick",
    "LoadPointBlock",
    "MeasuredPick",
    "OperatingBlock",
    "ScreenedBest",
    "TunedBest",
    "TunedPick",
    "VariantSummary",
    "load_best",
]

# The layout best.yaml is written in; bump it with an upgrade in _UPGRADES when it changes.
BEST_SCHEMA_VERSION = 1
# Latencies are written under keys naming the SLA percentile they are at (ttft_p95_ms).
_LATENCY_KEY = re.compile(r"^(ttft|tpot)_p(\d+)_ms$")
_LATENCY_FIELDS = ("ttft_ms", "tpot_ms")
_BAND_FIELDS = (
    "ttft_band_pct",
    "tpot_band_pct",
    "e2e_band_pct",
    "throughput_band_pct",
    "band_widening",
    "band_source",
)


class _Block(BaseModel):
    """A block of best.yaml: unknown keys refused; `ttft_ms` / `tpot_ms` written per percentile.

    A block with a `percentile` field writes its latencies as `ttft_p<percentile>_ms` (the
    keys users read) and reads them back from those keys. Fields named in `omit_when_none`
    are left out of the file when None (a fixed-load tune has no capacity block).
    """

    model_config = ConfigDict(extra="forbid")
    omit_when_none: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _read_latency_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "percentile" not in cls.model_fields:
            return data
        out = dict(data)
        for key in data:
            match = _LATENCY_KEY.match(str(key))
            if match:
                out[f"{match[1]}_ms"] = out.pop(key)
                out.setdefault("percentile", int(match[2]))
        return out

    @model_serializer(mode="wrap")
    def _write_latency_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        pct = getattr(self, "percentile", None)
        out = {}
        for key, value in data.items():
            if key in self.omit_when_none and value is None:
                continue
            if pct is not None and key in _LATENCY_FIELDS:
                key = f"{key.removesuffix('_ms')}_p{pct}_ms"
            out[key] = value
        return out


class LoadPointBlock(_Block):
    """One load of a variant's capacity search: throughput, latencies and the error band."""

    percentile: int = Field(exclude=True, description="SLA percentile of the latencies")
    load: float = Field(description="Offered load per replica: req/s (rate) or users")
    requests_per_s_per_gpu: float
    output_tokens_per_s_per_gpu: float
    ttft_ms: float
    tpot_ms: float
    ttft_band_pct: float | None = None
    tpot_band_pct: float | None = None
    e2e_band_pct: float | None = None
    throughput_band_pct: float | None = None
    band_widening: float | None = None
    band_source: str | None = None


class OperatingBlock(LoadPointBlock):
    """The load to drive a replica at: the capacity less its headroom."""

    headroom: float = Field(description="Fraction of the capacity kept spare (0: none met it)")


class BatchLimits(_Block):
    """The engine batch limits that reproduce the capacity."""

    max_num_seqs: int
    max_num_batched_tokens: int
    peak_concurrent_seqs_at_capacity: int


class BindingBlock(_Block):
    """What stops the load from rising past the capacity, and why (tuner.backends.binding)."""

    bound: str = Field(description="ttft, tpot, saturation, load-searched, probe-budget, unmet")
    driver: str = Field(description="What the engine is short of there")
    limit: str = Field(description="The bound, in words, with the probe that broke it")
    why: str = Field(description="The driver, in words, with the simulator's evidence")
    evidence: dict[str, float | None] = Field(default_factory=dict)


class CapacityFields(_Block):
    """A recommendation's capacity, operating load and batch limits (capacity searches only)."""

    omit_when_none: ClassVar[tuple[str, ...]] = (
        "load_mode",
        "load_unit",
        "capacity",
        "operating_point",
        "batch_limits",
        "capacity_probes",
        "binding",
    )
    load_mode: LoadMode | None = None
    load_unit: str | None = None
    capacity: LoadPointBlock | None = None
    operating_point: OperatingBlock | None = None
    batch_limits: BatchLimits | None = None
    capacity_probes: int | None = None
    binding: BindingBlock | None = None


class _TunedCore(_Block):
    percentile: int = Field(exclude=True, description="SLA percentile of the latencies")
    trial: int
    headroom_met: bool
    config: EngineConfig
    engine_version: str | None = Field(
        default=None, description="The release of config.engine its metrics describe"
    )
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s: float
    kv_capacity_tokens: int
    weights_gib: float
    backend: str


# Fields of the later base come first: the core, then the capacity block.
class TunedPick(CapacityFields, _TunedCore):
    """A tune's recommended trial with its simulated (or measured) metrics."""

    omit_when_none: ClassVar[tuple[str, ...]] = (
        *CapacityFields.omit_when_none,
        "engine_version",
        "speculation",
        "speculation_measured",
    )
    speculation: str | None = Field(
        default=None, description="What a speculating pick's acceptance rests on"
    )
    speculation_measured: bool | None = Field(
        default=None, description="False: its gain rests on an assumed, unmeasured acceptance"
    )


class VariantSummary(_Block):
    """A variant a screened tune measured: its role, configuration and measured capacity."""

    percentile: int = Field(exclude=True, description="SLA percentile of the latencies")
    role: Literal["baseline", "candidate"]
    predicted_rank: int | None
    screen_trial: int | None
    status: Literal["measured", "infeasible", "skipped"]
    meets_sla: bool
    config: EngineConfig
    capacity_tok_s_per_gpu: float | None
    ttft_ms: float | None
    tpot_ms: float | None


class MeasuredPick(CapacityFields, VariantSummary):
    """A screened tune's recommendation: the best measured variant and its capacity block."""

    backend: str


class ExportPick(_Block):
    """Which trial an engine's exports/ files come from."""

    trial: int


class _BestBase(_Block):
    schema_version: int = Field(default=BEST_SCHEMA_VERSION, description="Layout of the file")
    sla: SLA
    rule: str = Field(description="How the recommendation was chosen, in words")


class TunedBest(_BestBase):
    """best.yaml of a tune: the recommendation (or the closest misses) and the front."""

    omit_when_none: ClassVar[tuple[str, ...]] = ("closest", "exports")
    mode: Literal["capacity", "fixed"]
    recommended: TunedPick | None
    closest: list[Miss] | None = Field(default=None, description="When nothing met the SLA")
    exports: dict[str, ExportPick | str] | None = Field(
        default=None, description="Per engine: the trial exported, or why none could be"
    )
    pareto_trials: list[int]
    knee_trial: int | None
    hypervolume: float


class ScreenedBest(_BestBase):
    """best.yaml of a screened tune: the best measured variant against the engine defaults."""

    mode: Literal["confirmed"] = "confirmed"
    recommended: MeasuredPick | None
    baseline: VariantSummary
    gain_over_defaults: float | None
    screen: str = Field(description="Where the simulator's own pick is")


class BestFile(RootModel[Annotated[TunedBest | ScreenedBest, Field(discriminator="mode")]]):
    """best.yaml, whichever tune wrote it (told apart by `mode`)."""


def _upgrade_v0(data: dict[str, Any]) -> dict[str, Any]:
    """Files written before schema_version left absent band values as empty strings."""
    rec = data.get("recommended")
    if isinstance(rec, dict):
        for name in ("capacity", "operating_point"):
            block = rec.get(name)
            if isinstance(block, dict):
                rec[name] = {
                    k: None if k in _BAND_FIELDS and v == "" else v for k, v in block.items()
                }
    return data


# _UPGRADES[n] turns a version-n best.yaml into version n + 1: one per BEST_SCHEMA_VERSION step.
_UPGRADES: tuple[Upgrade, ...] = (_upgrade_v0,)


def load_best(path: Path) -> TunedBest | ScreenedBest:
    """Read and validate a best.yaml (any schema version this tuner knows)."""
    return read_result(path, BestFile, "best.yaml", _UPGRADES).root
