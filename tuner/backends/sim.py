"""The `sim` backend: predicts Metrics with the analytical model and the scheduler simulation."""

from __future__ import annotations

from tuner.backends.base import CheckedBackend, no_capacity
from tuner.errors import TunerError
from tuner.perf.bands import band_columns, band_for, grid_point
from tuner.perf.capacity import sim_capacity
from tuner.perf.efficiency import Efficiency
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.perf.predict import predict_metrics
from tuner.specs import Context, EngineConfig, Metrics, draft_to_load

__all__ = ["SimBackend"]


# What the model can fail with on a variant it cannot model (reported as infeasible).
_FAILURES = (TunerError, ValueError, ArithmeticError, LookupError)


class SimBackend(CheckedBackend):
    """Predicts instead of measuring; fast enough for thousands of variants per search."""

    name = "sim"

    def __init__(
        self,
        *,
        seed: int | None = None,
        efficiency: Efficiency | None = None,
        capacity: bool = False,
        **_ignored: object,
    ) -> None:
        """`seed` overrides the workload's; `capacity` adds `capacity_rps_per_gpu` to extra."""
        self.seed = seed
        # None: each prediction uses its GPU's calibrated constants (else the defaults).
        self.efficiency = efficiency
        self.capacity = capacity

    def _resolve(self, config: EngineConfig, ctx: Context) -> Context:
        """Fill `ctx.draft` from the catalog when the config names a draft model it lacks."""
        updates: dict[str, object] = {}
        if self.seed is not None and ctx.workload.seed != self.seed:
            updates["workload"] = ctx.workload.model_copy(update={"seed": self.seed})
        draft = draft_to_load(config)
        if draft and (ctx.draft is None or ctx.draft.name != draft):
            from tuner.catalog import load_model

            updates["draft"] = load_model(draft)
        return ctx.model_copy(update=updates) if updates else ctx

    def _evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """Predict `config` under `ctx.workload` (adds the capacity when asked)."""
        try:
            ctx = self._resolve(config, ctx)
            metrics = predict_metrics(config, ctx, self.efficiency)
            if metrics.feasible:
                band = band_for(ctx.gpu, grid_point(config, ctx.workload, metrics))
                metrics.extra.update(band_columns(band))
            if self.capacity and metrics.feasible:
                cap, _ = sim_capacity(config, ctx, eff=self.efficiency)
                metrics.extra["capacity_rps_per_gpu"] = cap.rps_per_gpu
                metrics.extra["capacity_tok_s_per_gpu"] = cap.tok_s_per_gpu
                metrics.extra["capacity_load"] = cap.at_sla.load if cap.at_sla else 0.0
                top_band = cap.at_sla.band if cap.at_sla else None
                metrics.extra["capacity_band_pct"] = band_columns(top_band)["throughput_band_pct"]
            return metrics
        except _FAILURES as exc:
            return self._failure(exc)

    def _capacity(
        self, config: EngineConfig, ctx: Context, mode: LoadMode, budget: ProbeBudget | None
    ) -> tuple[Capacity, Metrics]:
        """The simulator's capacity search of `config` (it knows the saturated rate)."""
        try:
            ctx = self._resolve(config, ctx)
            return sim_capacity(config, ctx, eff=self.efficiency, mode=mode, budget=budget)
        except _FAILURES as exc:
            return no_capacity(config, mode), self._failure(exc)

    def _failure(self, exc: Exception) -> Metrics:
        if isinstance(exc, TunerError):
            return Metrics.infeasible(str(exc), self.name)
        return Metrics.infeasible(f"simulator could not model this variant: {exc}", self.name)
