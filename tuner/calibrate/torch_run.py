"""`tuner calibrate --backend torch`: device peaks, engine step times, fit, calibrated profile."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tuner.calibrate.device import DeviceMeasurement, measure_device
from tuner.calibrate.fit import FitResult, fit_efficiency
from tuner.calibrate.measure import STEP_GRID, StepGrid, measure_steps
from tuner.calibrate.profile import build_calibration, host_label, with_calibration
from tuner.calibrate.steps import StepSample, predict_step_seconds
from tuner.calibration_schema import CalibrationGrid
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from tuner.specs import EngineConfig, GPUProfile, ModelSpec

__all__ = ["Calibrated", "calibrate_torch", "step_grid_covered"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Calibrated:
    """A finished calibration: the profile to write and the evidence behind it."""

    profile: GPUProfile
    fit: FitResult
    device: DeviceMeasurement
    measurements: int


def step_grid_covered(samples: Sequence[StepSample]) -> CalibrationGrid:
    """The batch / context / chunk ranges the timed steps covered."""
    decode = [s for s in samples if s.kind == "decode_step"]
    prefill = [s for s in samples if s.kind == "prefill_step"]
    batch = [s.batch for s in decode] or [1]
    context = [s.decode_ctx for s in decode] + [s.ctx_before + s.chunk for s in prefill]
    chunk = [s.chunk for s in prefill] or [0]
    return CalibrationGrid(
        batch=(min(batch), max(batch)),
        context=(min(context), max(context)),
        chunk=(min(chunk), max(chunk)),
    )


def calibrate_torch(
    spec: ModelSpec,
    *,
    grid: StepGrid = STEP_GRID,
    device: str | None = None,
    threads: int | None = None,
    model_path: str | None = None,
    progress: Progress = lambda _: None,
) -> Calibrated:
    """Measure this device and the reference engine's steps on `spec`; fit; build the profile."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _calibrate(spec, grid, device, model_path, progress)
    finally:
        torch.set_num_threads(before)  # the caller's process keeps its own setting


def _calibrate(
    spec: ModelSpec, grid: StepGrid, device: str | None, model_path: str | None, progress: Progress
) -> Calibrated:
    import torch

    where = device or ("cuda" if torch.cuda.is_available() else "cpu")
    progress(f"measuring the device ({where}): copy bandwidth, GEMM throughput per dtype")
    base, peaks = measure_device(where)
    progress(", ".join(f"{k} {v:.4g}" for k, v in peaks.items()))
    samples = measure_steps(spec, grid, where, progress, model_path)
    progress(f"fitting the efficiency constants to {len(samples)} step times")
    config = EngineConfig()

    def predict(eff: Efficiency) -> np.ndarray:
        return predict_step_seconds(samples, spec, base, config, eff)

    fit = fit_efficiency(
        predict,
        [float(s.seconds or 0.0) for s in samples],
        [s.kind for s in samples],
        DEFAULT_EFFICIENCY,
    )
    host = host_label(base, where, torch.get_num_threads())
    calibration = build_calibration("torch", spec.name, host, fit, step_grid_covered(samples))
    return Calibrated(with_calibration(base, calibration), fit, peaks, len(samples))
