"""The calibrated device profile: measured peaks + fitted efficiency, as a `--gpu` YAML file."""

from __future__ import annotations

import datetime as dt
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from tuner.calibration_schema import AcceptanceCurve, Calibration, CalibrationGrid
from tuner.errors import InputError
from tuner.specs import GPUProfile
from tuner.yaml_read import load_yaml_model

if TYPE_CHECKING:  # the fit pulls in scipy; `tuner acceptance` imports this module at start-up
    from tuner.calibrate.fit import FitResult

__all__ = [
    "build_calibration",
    "default_output",
    "host_label",
    "keep_acceptance",
    "require_calibrated",
    "store_acceptance",
    "with_calibration",
    "write_profile",
]

_HEADER = (
    "# Device profile written by `tuner calibrate`: peaks measured on this host, efficiency\n"
    "# constants fitted to timings here (not a datasheet). Use it as --gpu FILE.\n"
)


def host_label(device_profile: GPUProfile, device: str, threads: int | None = None) -> str:
    """Where the calibration ran, said plainly: the host, the device, and what it is."""
    where = socket.gethostname() or "this host"
    if device == "cpu":
        cores = os.cpu_count() or 1
        used = f", {threads} torch thread(s)" if threads else ""
        return (
            f"{where}: {device_profile.display_name} - the CPU ({cores} cores{used}), "
            "calibrated on this host's CPU by tuner calibrate, no GPU"
        )
    return f"{where}: {device_profile.display_name} ({device}), calibrated by tuner calibrate"


def build_calibration(
    backend: Literal["torch", "vllm"],
    model: str,
    host: str,
    fit: FitResult,
    grid: CalibrationGrid,
) -> Calibration:
    """The `calibration` block of a freshly measured device."""
    return Calibration(
        backend=backend,
        model=model,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        host=host,
        efficiency=fit.fitted,
        residuals=fit.residuals,
        grid=grid,
    )


def with_calibration(device_profile: GPUProfile, calibration: Calibration) -> GPUProfile:
    """The device profile carrying its calibration (and saying so in its display name)."""
    display = device_profile.display_name
    if "calibrated" not in display:
        display = f"{display}, calibrated"
    return device_profile.model_copy(update={"calibration": calibration, "display_name": display})


def default_output(profile: GPUProfile) -> Path:
    """calibrated-<host>.yaml in the working directory."""
    host = (socket.gethostname() or profile.name).split(".")[0]
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in host) or "host"
    return Path(f"calibrated-{safe}.yaml")


def keep_acceptance(profile: GPUProfile, path: Path) -> GPUProfile:
    """`profile` with the acceptance curves a profile already at `path` holds (re-calibrating the
    device does not invalidate what `tuner acceptance` measured on the model)."""
    if profile.calibration is None or not path.is_file():
        return profile
    try:
        old = GPUProfile.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, ValueError, yaml.YAMLError):
        return profile  # not a profile we wrote: it is replaced, as --out says
    if old.calibration is None or not old.calibration.acceptance:
        return profile
    calibration = profile.calibration.model_copy(update={"acceptance": old.calibration.acceptance})
    return profile.model_copy(update={"calibration": calibration})


def require_calibrated(path: Path) -> None:
    """One-line error unless `path` is a valid GPU profile with a calibration block."""
    if not path.is_file():
        raise InputError(f"--into {path}: no such profile file")
    if load_yaml_model(path, GPUProfile).calibration is None:
        raise InputError(
            f"{path}: the profile has no calibration block; run `tuner calibrate` first"
        )


def store_acceptance(path: Path, curve: AcceptanceCurve) -> None:
    """Add `curve` to the profile's calibration.acceptance, replacing one of the same draft."""
    require_calibrated(path)
    # Edited as plain YAML so every other field is written back as it was read.
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    kept = [c for c in data["calibration"].get("acceptance") or [] if c.get("draft") != curve.draft]
    data["calibration"]["acceptance"] = [*kept, curve.model_dump(mode="json")]
    GPUProfile.model_validate(data)
    _write(path, yaml.safe_dump(data, sort_keys=False))


def write_profile(profile: GPUProfile, path: Path) -> None:
    """Write the profile YAML (readable back by every `--gpu FILE` and `tuner validate`)."""
    _write(path, _HEADER + yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
