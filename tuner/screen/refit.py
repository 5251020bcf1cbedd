"""`tune --screen sim --confirm K --refit`: a screened tune's measurements fed back into the device
profile. Each measured variant is one observation (its variant, the workload at the load it was
measured at, the measured Metrics); `tuner.calibrate.refit.refit_profile` refits the efficiency
constants, and the refitted profile is written to RUN/device.yaml for the next `--gpu`."""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tuner.backends.sim import SimBackend
from tuner.calibrate.profile import write_profile
from tuner.calibrate.refit import REQUEST_QUANTITIES, Observation, refit_profile
from tuner.perf.load import workload_at
from tuner.run_spec import RunSpec
from tuner.screen.variant import ConfirmedVariant
from tuner.specs import SLA, Context, GPUProfile

__all__ = [
    "DEVICE_FILE",
    "RefitReport",
    "error_moved",
    "median_errors",
    "observations",
    "refit_device",
]

DEVICE_FILE = "device.yaml"


class RefitReport(BaseModel):
    """Where the refitted profile went, and the simulator's error before and after the refit."""

    model_config = ConfigDict(extra="forbid")

    path: Path
    observations: int
    before: dict[str, float]  # quantity -> median |predicted / measured - 1| (P50s)
    after: dict[str, float]

    def moved(self) -> str:
        """How the simulator's error moved, e.g. 'TTFT P50 281% -> 12%, TPOT P50 80% -> 9%'."""
        return error_moved(self.before, self.after)


def error_moved(before: dict[str, float], after: dict[str, float]) -> str:
    """'TTFT P50 281% -> 12%, ...' from two `median_errors` results."""
    return ", ".join(
        f"{name.upper()} P50 {was:.0%} -> {after.get(name, float('nan')):.0%}"
        for name, was in before.items()
    )


def observations(variants: list[ConfirmedVariant], spec: RunSpec) -> list[Observation]:
    """One observation per variant measured at a load (skipped and failed ones carry none)."""
    out = []
    for v in variants:
        if v.status != "measured" or v.metrics is None or v.compared_load is None:
            continue
        wl = workload_at(spec.workload, spec.capacity_load, v.compared_load)
        out.append(Observation(config=v.config, workload=wl, measured=v.metrics))
    return out


def median_errors(gpu: GPUProfile, spec: RunSpec, obs: list[Observation]) -> dict[str, float]:
    """Median |predicted / measured - 1| of each quantity the refit fits, with `gpu`."""
    sim = SimBackend()
    errors: dict[str, list[float]] = {name: [] for name, _ in REQUEST_QUANTITIES}
    for o in obs:
        ctx = Context(model=spec.model, gpu=gpu, sla=SLA(), workload=o.workload)
        predicted = sim.evaluate(o.config, ctx)
        for name, field in REQUEST_QUANTITIES:
            measured = getattr(o.measured, field).p50
            if predicted.feasible and measured > 0:
                errors[name].append(abs(getattr(predicted, field).p50 / measured - 1.0))
    return {name: statistics.median(e) for name, e in errors.items() if e}


def refit_device(variants: list[ConfirmedVariant], spec: RunSpec, run_dir: Path) -> RefitReport:
    """Refit `spec.gpu` from the measured variants, write RUN/device.yaml, say how it moved."""
    obs = observations(variants, spec)
    if not obs:
        raise ValueError("no variant was measured: nothing to refit")
    refitted = refit_profile(spec.gpu, spec.model, obs)
    path = run_dir / DEVICE_FILE
    write_profile(refitted, path)
    return RefitReport(
        path=path,
        observations=len(obs),
        before=median_errors(spec.gpu, spec, obs),
        after=median_errors(refitted, spec, obs),
    )
