"""What a `tuner tune` command may change and where it writes: the flags a loaded run takes,
the default GPU count, and the run folder a new, repeated or resumed run goes to."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from tuner.detect import MEASURING_BACKENDS, local_device_count
from tuner.errors import InputError
from tuner.run.folder import claim_run_dir
from tuner.run.tune import check_run_dir
from tuner.run_spec import DEFAULT_NUM_GPUS, RunSpec, run_dir_name

__all__ = [
    "CONFIG_OVERRIDES",
    "RESUME_OVERRIDES",
    "check_overrides",
    "default_num_gpus",
    "target_folder",
    "with_budgets",
]

# Flags that may change a run loaded from run.yaml (--config) or a run folder (--resume); every
# other flag would be silently ignored, so it is refused. A resumed screened run also takes new
# measuring budgets (tuner.screen.options).
CONFIG_OVERRIDES = frozenset({"trials", "timeout", "out", "run_dir", "config", "jobs"})
RESUME_OVERRIDES = frozenset(
    {"trials", "timeout", "resume", "jobs", "confirm", "rounds", "confirm_seconds", "refit"}
)


def _flags(names: Iterable[str]) -> str:
    return ", ".join("--" + name.replace("_", "-") for name in names)


def check_overrides(given: Iterable[str], *, resume: bool, config: bool) -> None:
    """Refuse the `given` flags (parameter names) a --resume or --config run cannot take."""
    if not resume and not config:
        return
    allowed, flag = (RESUME_OVERRIDES, "--resume") if resume else (CONFIG_OVERRIDES, "--config")
    refused = [name for name in given if name not in allowed]
    if refused:
        raise InputError(
            f"{_flags(refused)} cannot be combined with {flag} (the run's inputs come from its "
            f"run.yaml); allowed with {flag}: {_flags(sorted(allowed))}"
        )


def default_num_gpus(backend: str) -> int:
    """8 GPUs to plan for, or the devices here when a backend measures on this machine."""
    return local_device_count() if backend in MEASURING_BACKENDS else DEFAULT_NUM_GPUS


def with_budgets(spec: RunSpec, trials: int | None, timeout_s: float | None) -> RunSpec:
    """`spec` with the trial and time budgets given now (a repeat or resume may change them)."""
    overrides = {"trials": trials, "timeout_s": timeout_s}
    return spec.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def target_folder(
    spec: RunSpec, *, resume: Path | None, run_dir: Path | None, out: Path, now: datetime
) -> tuple[Path, bool]:
    """(run folder, whether this call created it); a `run_dir` holding another run is refused
    here, before any work."""
    if resume is not None:
        return resume, False
    if run_dir is not None:
        check_run_dir(spec, run_dir)
        return run_dir, False
    # A new, exclusively created folder: two tunes in the same second never share one.
    return claim_run_dir(out, run_dir_name(spec, now)), True
