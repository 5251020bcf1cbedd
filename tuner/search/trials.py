"""One finished (or interrupted) search trial as plain data, read back from an Optuna study."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from tuner.errors import one_line
from tuner.knobs import searched
from tuner.perf.load import Capacity
from tuner.search.objectives import objectives_for
from tuner.sla import meets_sla
from tuner.specs import SLA, EngineConfig, Metrics

__all__ = ["ATTR_CAPACITY", "KNOBS", "TrialRecord", "TrialState", "record_from_frozen"]

# The knobs a search varies, in the order samplers see them every trial (order changes what a
# seeded sampler proposes, so the registry fixes it once for the search and the report).
KNOBS: tuple[str, ...] = tuple(k.name for k in searched())

TrialState = Literal["complete", "pruned", "failed", "running", "waiting"]

# Keys of the trial user attributes the search writes (see search.py).
ATTR_CONFIG = "config"
ATTR_METRICS = "metrics"
ATTR_REASON = "reason"
ATTR_DUPLICATE_OF = "duplicate_of"
ATTR_METRICS_KEY = "metrics_key"
ATTR_CAPACITY = "capacity"


class TrialRecord(BaseModel):
    """What one trial tried and what came back."""

    model_config = ConfigDict(extra="forbid")

    number: int
    state: TrialState
    params: dict[str, Any]
    config: EngineConfig | None = None
    metrics: Metrics | None = None
    reason: str | None = None  # why it was pruned / failed / ran infeasible
    duplicate_of: int | None = None  # trial whose evaluation was reused
    capacity: Capacity | None = None  # capacity mode: the load search and its ladder
    duration_s: float | None = None

    @property
    def evaluated(self) -> bool:
        """A complete trial with metrics (ran, possibly infeasible)."""
        return self.state == "complete" and self.metrics is not None

    def meets(self, sla: SLA) -> bool:
        """Ran, fit in memory and met every SLA bound."""
        return self.evaluated and self.metrics is not None and meets_sla(self.metrics, sla)

    def objective_values(self, sla: SLA) -> list[float]:
        """The objective numbers (natural direction) of an evaluated trial."""
        assert self.metrics is not None, f"trial {self.number} has no metrics"
        objectives = objectives_for(sla, capacity=self.capacity is not None)
        return [o.value(self.metrics) for o in objectives]


_STATES: dict[str, TrialState] = {
    "COMPLETE": "complete",
    "PRUNED": "pruned",
    "FAIL": "failed",
    "RUNNING": "running",
    "WAITING": "waiting",
}


def record_from_frozen(trial: Any) -> TrialRecord:
    """Convert an optuna FrozenTrial written by tuner.search.study into a TrialRecord."""
    attrs = trial.user_attrs
    config = attrs.get(ATTR_CONFIG)
    metrics = attrs.get(ATTR_METRICS)
    duration = trial.duration.total_seconds() if trial.duration is not None else None
    try:
        return TrialRecord(
            number=trial.number,
            state=_STATES[trial.state.name],
            params=dict(trial.params),
            config=EngineConfig.model_validate(config) if config else None,
            metrics=Metrics.model_validate(metrics) if metrics else None,
            reason=attrs.get(ATTR_REASON),
            duplicate_of=attrs.get(ATTR_DUPLICATE_OF),
            capacity=Capacity.model_validate(attrs[ATTR_CAPACITY])
            if ATTR_CAPACITY in attrs
            else None,
            duration_s=duration,
        )
    except (ValidationError, TypeError, ValueError, KeyError) as exc:
        # A hand-edited or corrupted study: show the trial as failed instead of failing the run.
        reason = f"unreadable trial data ({one_line(str(exc), 120)})"
        return TrialRecord(number=trial.number, state="failed", params={}, reason=reason)
