"""What a study is for, recorded in the study itself: the run spec, its trial budget and how many
workers joined (each takes the next sampler seed).

`tuner tune --storage URL --study NAME` records its RunSpec in the study, so `tuner worker` on any
host reads what to evaluate from the storage, and a run with other inputs (another model, GPU,
SLA, workload, space or backend) is refused instead of silently mixing its trials in.
"""

from __future__ import annotations

from typing import Any

import optuna

from tuner.errors import InputError
from tuner.run_spec import RunSpec, validate_run_spec
from tuner.search.storage import public_url, study_lock

__all__ = [
    "ATTR_BUDGET",
    "ATTR_SPEC",
    "ATTR_WORKERS",
    "bind_spec",
    "claim_worker_number",
    "identity",
    "read_budget",
    "spec_from_study",
]

# Study user attributes.
ATTR_SPEC = "tuner.run_spec"
ATTR_BUDGET = "tuner.trials"
ATTR_WORKERS = "tuner.workers"

# The RunSpec fields that change what a trial measures; runs that differ in any may not share.
IDENTITY_FIELDS = ("model", "gpu", "sla", "workload", "space", "num_gpus", "drafts", "backend")
# Backend options that name things on one host (weights folder, log folder), not what is measured.
HOST_OPTIONS = frozenset({"model_path", "run_dir"})


def identity(spec_json: dict[str, Any]) -> dict[str, Any]:
    """The parts of a run spec (as JSON) that two runs sharing a study must agree on."""
    out = {k: spec_json.get(k) for k in IDENTITY_FIELDS}
    options = spec_json.get("backend_options") or {}
    out["backend_options"] = {k: v for k, v in options.items() if k not in HOST_OPTIONS}
    return out


def _record(spec: RunSpec) -> dict[str, Any]:
    # The storage URL may hold a password and differs per host: workers bring their own.
    return spec.model_dump(mode="json", exclude={"storage"})


def _named(value: Any) -> str:
    return str(value.get("name", "...")) if isinstance(value, dict) else str(value)


def _differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> str:
    parts = []
    for key in identity(recorded):
        there, here = identity(recorded)[key], identity(wanted)[key]
        if there == here:
            continue
        if key in ("model", "gpu", "sla", "backend", "num_gpus") and _named(there) != _named(here):
            parts.append(f"{key} {_named(there)!r} there, {_named(here)!r} here")
        else:
            parts.append(f"{key} differs")
    return "; ".join(parts)


def bind_spec(study: optuna.Study, spec: RunSpec, where: str) -> None:
    """Record `spec` in a new study, or refuse one that was created for other inputs."""
    storage = study._storage  # noqa: SLF001
    with study_lock(storage, study.study_name):
        recorded = study.user_attrs.get(ATTR_SPEC)
        wanted = _record(spec)
        if recorded is None:
            study.set_user_attr(ATTR_SPEC, wanted)
        elif identity(recorded) != identity(wanted):
            raise InputError(
                f"study {study.study_name!r} in {public_url(where)} was made for another run "
                f"({_differences(recorded, wanted)}); choose another --study name or run folder"
            )
        study.set_user_attr(ATTR_BUDGET, spec.trials)


def spec_from_study(study: optuna.Study, storage_url: str) -> RunSpec:
    """The run spec `tuner tune` recorded in the study, pointed at this host's storage URL."""
    recorded = study.user_attrs.get(ATTR_SPEC)
    if not isinstance(recorded, dict):
        raise InputError(
            f"study {study.study_name!r} in {public_url(storage_url)} holds no run spec; "
            "create it with `tuner tune --storage URL --study NAME`"
        )
    data = {**recorded, "storage": storage_url, "study_name": study.study_name}
    data["trials"] = read_budget(study, int(recorded.get("trials", 1)))
    return validate_run_spec(data, f"the run spec in study {study.study_name!r}")


def read_budget(study: optuna.Study, default: int) -> int:
    """The study's trial budget: the latest `tuner tune --trials` that opened it."""
    value = study.user_attrs.get(ATTR_BUDGET, default)
    return value if isinstance(value, int) and value > 0 else default


def claim_worker_number(study: optuna.Study) -> int:
    """The next worker number of the study (0 for the first process): seeds differ per worker."""
    with study_lock(study._storage, study.study_name):  # noqa: SLF001
        number = study.user_attrs.get(ATTR_WORKERS, 0)
        number = number if isinstance(number, int) and number >= 0 else 0
        study.set_user_attr(ATTR_WORKERS, number + 1)
    return number
