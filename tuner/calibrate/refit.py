"""Request-level fits: measured TTFT/TPOT of whole runs against the simulator's predictions.

`refit_profile` updates a device profile from confirmed measurements (`tune --confirm --refit`);
`tuner calibrate --backend vllm` fits a fresh profile the same way from its own runs. Each
observation is one measured run (variant, workload, Metrics); the sim backend replays the same
run and the fit moves the efficiency constants the runs identify.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from tuner.backends.sim import SimBackend
from tuner.calibrate.fit import FITTABLE, FitResult, fit_efficiency
from tuner.calibration_schema import Calibration, CalibrationGrid
from tuner.perf.efficiency import Efficiency, efficiency_of
from tuner.specs import SLA, Context, EngineConfig, GPUProfile, Metrics, ModelSpec, Workload

__all__ = [
    "REQUEST_QUANTITIES",
    "Observation",
    "fit_requests",
    "observed_grid",
    "refit_profile",
]

# Request-level quantities fitted, as (residual name, Metrics field); P50 of each.
REQUEST_QUANTITIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"))
# A prediction the simulator cannot make (infeasible) counts as this many times the measurement:
# a large, finite log error that pushes the fit away without breaking the solver.
_INFEASIBLE_FACTOR = 1e3
# Finite-difference step in log space: the simulated schedule reacts to timing in small jumps,
# so the step is wider than for the smooth step-time model.
_DIFF_STEP = 0.03
# Few runs, each with noise: a constant moves by a factor e only if that removes ~10% log error
# (see fit_efficiency's `prior`), so weakly identified constants stay near their current values.
_PRIOR = 0.1
_MEASURING = ("torch", "vllm")


class Observation(BaseModel):
    """One measured run: the variant, the workload it served, and what was measured."""

    model_config = ConfigDict(extra="forbid")

    config: EngineConfig
    workload: Workload
    measured: Metrics


def _targets(observations: Sequence[Observation]) -> list[tuple[int, str, str, float]]:
    """(observation, residual name, Metrics field, measured ms) of every usable measurement."""
    out = []
    for i, obs in enumerate(observations):
        if not obs.measured.feasible:
            continue
        for name, field in REQUEST_QUANTITIES:
            value = getattr(obs.measured, field).p50
            if value > 0:
                out.append((i, name, field, float(value)))
    return out


def fit_requests(
    gpu: GPUProfile,
    model: ModelSpec,
    observations: Sequence[Observation],
    start: Efficiency | None = None,
    names: Sequence[str] = tuple(FITTABLE),
) -> FitResult:
    """Fit efficiency constants so simulated TTFT/TPOT P50s match the observed ones."""
    targets = _targets(observations)
    if not targets:
        raise ValueError("no feasible observation with a measured TTFT or TPOT to fit")
    used = sorted({i for i, *_ in targets})
    measured = np.array([v for *_, v in targets])
    ctxs = {
        i: Context(model=model, gpu=gpu, sla=SLA(), workload=observations[i].workload) for i in used
    }

    def predict(eff: Efficiency) -> np.ndarray:
        # The sim backend: validity rules, draft models resolved, failures as infeasible.
        sim = SimBackend(efficiency=eff)
        runs = {i: sim.evaluate(observations[i].config, ctxs[i]) for i in used}
        return np.array(
            [
                getattr(runs[i], field).p50 if runs[i].feasible else _INFEASIBLE_FACTOR * value
                for i, _, field, value in targets
            ]
        )

    first = start if start is not None else efficiency_of(gpu.calibration)
    kinds = [name for _, name, _, _ in targets]
    return fit_efficiency(
        predict, measured, kinds, first, names, diff_step=_DIFF_STEP, prior=_PRIOR
    )


def observed_grid(observations: Sequence[Observation]) -> CalibrationGrid:
    """The batch / context / chunk ranges a set of runs covered."""
    users = [o.workload.concurrency or o.config.max_num_seqs for o in observations]
    ctx = [o.workload.input_tokens + o.workload.output_tokens for o in observations]
    chunk = [min(o.workload.input_tokens, o.config.max_num_batched_tokens) for o in observations]
    return CalibrationGrid(
        batch=(min(users), max(users)), context=(min(ctx), max(ctx)), chunk=(min(chunk), max(chunk))
    )


def _union(a: CalibrationGrid, b: CalibrationGrid) -> CalibrationGrid:
    def span(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
        return (min(x[0], y[0]), max(x[1], y[1]))

    return CalibrationGrid(
        batch=span(a.batch, b.batch),
        context=span(a.context, b.context),
        chunk=span(a.chunk, b.chunk),
    )


def refit_profile(gpu: GPUProfile, model: ModelSpec, observations: list[Observation]) -> GPUProfile:
    """`gpu` with its efficiency refitted to measured runs (TTFT/TPOT P50 log errors).

    Constants the runs do not identify keep their current values; `calibration.refits` counts
    the refits and the 'ttft'/'tpot' residuals are replaced by this fit's. A datasheet profile
    (no calibration yet) gains one, labelled with the observations' backend.
    """
    result = fit_requests(gpu, model, observations)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    grid = observed_grid([o for o in observations if o.measured.feasible])
    old = gpu.calibration
    if old is None:
        backend = next(
            (o.measured.backend for o in observations if o.measured.backend in _MEASURING), "vllm"
        )
        calibration = Calibration(
            backend=backend,  # type: ignore[arg-type]
            model=model.name,
            measured_at=now,
            host=f"{gpu.display_name} (refitted from measured runs, datasheet peaks)",
            efficiency=result.fitted,
            residuals=result.residuals,
            grid=grid,
            refits=1,
        )
    else:
        calibration = old.model_copy(
            update={
                "efficiency": {**old.efficiency, **result.fitted},
                "residuals": {**old.residuals, **result.residuals},
                "grid": _union(old.grid, grid),
                "measured_at": now,
                "refits": old.refits + 1,
            }
        )
    return gpu.model_copy(update={"calibration": calibration})
