"""`tuner worker` as a library call: join a shared study, read its run spec from the storage,
evaluate trials on this host until the study's budget is met; and a run folder from a study."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tuner.backends import get_backend
from tuner.errors import InputError
from tuner.run.lock import run_folder_lock
from tuner.run.shared import claim_worker_number, read_budget, spec_from_study
from tuner.run.stop import hand_back_running
from tuner.run.tune import TuneOutcome, check_run_dir, rebuild, run_evaluator
from tuner.run_spec import RUN_FILE, RunSpec
from tuner.search import study as search
from tuner.search.parallel import RequeueOnce, count_states, run_trials
from tuner.search.storage import GRACE_S, make_storage, public_url

__all__ = ["WorkerOutcome", "load_shared_study", "rebuild_from_storage", "work"]


@dataclass
class WorkerOutcome:
    """What one worker did."""

    spec: RunSpec
    worker_number: int
    seed: int
    trials: int
    evaluations: int
    finished_in_study: int
    wall_s: float

    def summary(self) -> str:
        """One plain line: what this worker ran and where the study stands."""
        return (
            f"worker {self.worker_number} (seed {self.seed}) ran {self.trials} trials "
            f"({self.evaluations} evaluations by {self.spec.backend}) in {self.wall_s:.1f} s; "
            f"study {self.spec.study_name} holds {self.finished_in_study} of {self.spec.trials} "
            "finished trials"
        )


def load_shared_study(storage_url: str, study_name: str, grace_s: int = GRACE_S) -> optuna.Study:
    """Open an existing study in a shared storage, or say how to create it."""
    storage = make_storage(storage_url, grace_s=grace_s)
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise InputError(
            f"no study {study_name!r} in {public_url(storage_url)}; create it with "
            f"`tuner tune --storage URL --study {study_name} ...`"
        ) from None


def _backend_options(
    spec: RunSpec, backend: str | None, model_path: str | None
) -> dict[str, object]:
    if backend is not None and backend != spec.backend:
        raise InputError(
            f"study {spec.study_name!r} evaluates with --backend {spec.backend}, not {backend}: "
            "trials of one study must be measured alike"
        )
    options = dict(spec.backend_options)
    options.pop("run_dir", None)  # the creator's log folder is a path on its own host
    if model_path is not None:
        options["model_path"] = model_path  # where this host keeps the weights
    return options


def work(
    storage_url: str,
    study_name: str,
    *,
    backend: str | None = None,
    model_path: str | None = None,
    max_trials: int | None = None,
    grace_s: int = GRACE_S,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
) -> WorkerOutcome:
    """Evaluate trials of a shared study here until its budget (or `max_trials`) is reached."""
    started = time.perf_counter()
    study = load_shared_study(storage_url, study_name, grace_s)
    spec = spec_from_study(study, storage_url)
    options = _backend_options(spec, backend, model_path)
    number = claim_worker_number(study)
    seed = spec.seed + number  # workers sharing a study propose different variants
    study.sampler = search.make_sampler(
        spec.sampler, seed=seed, space=spec.space, ctx=spec.context()
    )
    evaluator = run_evaluator(spec, get_backend(spec.backend, **options))
    try:
        ran = run_trials(
            study,
            evaluator,
            budget=lambda: read_budget(study, spec.trials),
            max_trials=max_trials,
            callbacks=callbacks or (),
            grace_s=grace_s,
        )
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, or `tune --jobs` stopping its workers
        hand_back_running(study, RequeueOnce())
        raise
    finished = count_states(study).finished
    return WorkerOutcome(
        spec, number, seed, ran, evaluator.evaluations, finished, time.perf_counter() - started
    )


def rebuild_from_storage(storage_url: str, study_name: str, run_dir: Path | None) -> TuneOutcome:
    """Write a run folder (report, CSVs, best.yaml, exports) from a shared study on any host."""
    study = load_shared_study(storage_url, study_name)
    spec = spec_from_study(study, storage_url)
    if run_dir is None:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", study_name).strip("-") or "study"
        run_dir = Path("reports") / f"study-{slug}"
    with run_folder_lock(run_dir):
        check_run_dir(spec, run_dir)  # never relabel a folder that holds another run
        (run_dir / RUN_FILE).write_text(spec.to_yaml())
        return rebuild(run_dir)
