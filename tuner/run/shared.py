"""What a study is for, recorded in the study itself: the run spec, its trial budget and how many
workers joined (each takes the next sampler seed).

`tuner tune --storage URL --study NAME` records its RunSpec in the study, so `tuner worker` on any
host reads what to evaluate from the storage, and a run with other inputs (another model, GPU,
SLA, workload, space, backend, load mode, probes, sampler or seed: every field of its identity,
`tuner.run.identity`) is refused instead of silently mixing its trials in.
"""

from __future__ import annotations

from typing import Any

import optuna

from tuner.errors import InputError
from tuner.run.identity import check_same_run
from tuner.run_spec import RunSpec, validate_run_spec
from tuner.search.storage import public_url, study_lock

__all__ = [
    "ATTR_BUDGET",
    "ATTR_SPEC",
    "ATTR_WORKERS",
    "bind_spec",
    "check_study_spec",
    "claim_worker_number",
    "read_budget",
    "spec_from_study",
]

# Study user attributes.
ATTR_SPEC = "tuner.run_spec"
ATTR_BUDGET = "tuner.trials"
ATTR_WORKERS = "tuner.workers"


def _record(spec: RunSpec) -> dict[str, Any]:
    # The storage URL may hold a password and differs per host: workers bring their own.
    return spec.model_dump(mode="json", exclude={"storage"})


def _recorded_spec(study: optuna.Study, recorded: dict[str, Any], spec: RunSpec) -> RunSpec:
    """The spec recorded in `study`, at `spec`'s storage URL (each host names the study its own
    way; the study is the same one by construction)."""
    # A field a later tuner dropped from RunSpec is no input any more: it cannot differ.
    known = {k: v for k, v in recorded.items() if k in RunSpec.model_fields}
    data = {**known, "storage": spec.storage, "study_name": study.study_name}
    return validate_run_spec(data, f"the run spec in study {study.study_name!r}")


def check_study_spec(
    study: optuna.Study,
    spec: RunSpec,
    where: str,
    remedy: str = "choose another --study name or run folder",
) -> None:
    """Refuse `spec` if `study` records another run (a study without a record passes)."""
    recorded = study.user_attrs.get(ATTR_SPEC)
    if isinstance(recorded, dict):
        what = f"study {study.study_name!r} in {public_url(where)}"
        check_same_run(_recorded_spec(study, recorded, spec), spec, what, remedy)


def bind_spec(study: optuna.Study, spec: RunSpec, where: str) -> None:
    """Record `spec` in a new study, or refuse one that was created for other inputs."""
    storage = study._storage  # noqa: SLF001
    with study_lock(storage, study.study_name):
        if study.user_attrs.get(ATTR_SPEC) is None:
            study.set_user_attr(ATTR_SPEC, _record(spec))
        else:
            check_study_spec(study, spec, where)
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
