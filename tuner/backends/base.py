"""The entry points every backend shares: refuse an invalid variant first, then run its steps."""

from __future__ import annotations

from abc import ABC, abstractmethod

from tuner.export.dispatch import engine_refusal
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.perf.memory import replica_gpus
from tuner.specs import Context, EngineConfig, Metrics
from tuner.validity import invalid_reason

__all__ = ["CheckedBackend", "no_capacity", "refusal"]


def no_capacity(config: EngineConfig, mode: LoadMode) -> Capacity:
    """The capacity of a variant that could not run (no load probed)."""
    return Capacity(mode=mode, tensor_parallel_size=replica_gpus(config))


def refusal(config: EngineConfig, ctx: Context) -> str | None:
    """Why no engine runs `config` under `ctx`: a validity rule, or its own engine cannot launch
    it (its exporter's options table), so the search never recommends what its engine refuses."""
    return invalid_reason(config, ctx) or engine_refusal(config, ctx)


class CheckedBackend(ABC):
    """`evaluate` and `capacity_search` with the validity rules applied before any work.

    A subclass gives `_evaluate` and `_capacity`, which never raise (infeasible Metrics
    instead); an invalid variant comes back with the same rule and words as predict/tune.
    """

    name: str

    def cannot_run(self, config: EngineConfig, ctx: Context) -> str | None:
        """Why this backend cannot run `config` under `ctx` (None: it can), without running it."""
        return refusal(config, ctx)

    def evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """Predict or measure `config` under `ctx.workload`; never raises."""
        if reason := refusal(config, ctx):
            return Metrics.infeasible(reason, self.name)
        return self._evaluate(config, ctx)

    def capacity_search(
        self,
        config: EngineConfig,
        ctx: Context,
        *,
        mode: LoadMode = "rate",
        budget: ProbeBudget | None = None,
    ) -> tuple[Capacity, Metrics]:
        """Capacity of `config` and its Metrics at the capacity load; never raises."""
        if reason := refusal(config, ctx):
            return no_capacity(config, mode), Metrics.infeasible(reason, self.name)
        return self._capacity(config, ctx, mode, budget)

    @abstractmethod
    def _evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """The backend's own evaluation of a valid variant."""

    @abstractmethod
    def _capacity(
        self, config: EngineConfig, ctx: Context, mode: LoadMode, budget: ProbeBudget | None
    ) -> tuple[Capacity, Metrics]:
        """The backend's own capacity search of a valid variant."""
