"""`tuner tune` as a library call: open the study, search, analyse, write the run folder."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.answer.analysed import AnalysedRun, analyse_run
from tuner.backends import Backend, get_backend
from tuner.errors import (
    BACKEND_FAILED,
    BackendError,
    InputError,
    InterruptedRunError,
    NoFeasibleConfigError,
)
from tuner.run.folder import make_run_dir, write_outputs
from tuner.run.identity import check_same_run
from tuner.run.jobs import LocalWorkers
from tuner.run.lock import run_folder_lock
from tuner.run.refine import refine, reserved
from tuner.run.shared import bind_spec, check_study_spec, claim_worker_number, read_budget
from tuner.run.stop import hand_back_running
from tuner.run_spec import RUN_FILE, RunSpec, load_run_spec
from tuner.search import study as search
from tuner.search.parallel import RequeueOnce, reap_dead_trials, run_trials
from tuner.search.pareto import ParetoResult, analyze, no_feasible_message
from tuner.search.storage import study_lock
from tuner.search.trials import TrialRecord

__all__ = [
    "TuneOutcome",
    "check_run_dir",
    "readable_study",
    "importances",
    "open_study",
    "rebuild",
    "require_recommendation",
    "run_backend",
    "run_evaluator",
    "storage_url",
    "tune",
]

# The study of a run without --storage: an Optuna journal file in the run folder. A 200-trial
# tune spent ~17 s of CPU in SQLite round trips and ~6 s in the journal (benchmarks/jobs_speed.py
# --storage sqlite|journal), and local workers (--jobs N) share a journal without waiting on a
# database write lock. Run folders written before keep their SQLite study.db.
STUDY_FILE = "study.journal"
SQLITE_FILE = "study.db"
STUDY_FILES = (STUDY_FILE, SQLITE_FILE)


@dataclass
class TuneOutcome:
    """What a finished (or rebuilt) run produced."""

    spec: RunSpec
    run_dir: Path
    records: list[TrialRecord]
    result: ParetoResult
    files: dict[str, Path]
    analysed: AnalysedRun  # picks, exports, explanations, answer card: computed once
    evaluations: int = 0
    wall_s: float = 0.0
    interrupted_trials: list[int] | None = None
    worker_errors: list[str] = field(default_factory=list)
    refinement_trials: list[int] = field(default_factory=list)  # tuner.run.refine


def storage_url(spec: RunSpec, run_dir: Path) -> str:
    """The run's Optuna storage: --storage, else the run folder's study.journal (or the study.db
    of a folder an older tuner wrote)."""
    if spec.storage:
        return spec.storage
    if (run_dir / SQLITE_FILE).is_file() and not (run_dir / STUDY_FILE).exists():
        return f"sqlite:///{(run_dir / SQLITE_FILE).resolve()}"
    return f"journal:{(run_dir / STUDY_FILE).resolve()}"


def _has_study_file(run_dir: Path) -> bool:
    return any((run_dir / name).is_file() for name in STUDY_FILES)


def open_study(spec: RunSpec, run_dir: Path, *, create: bool) -> optuna.Study:
    """Create or join the run's study (same name, same inputs; each joiner its own seed); never
    creates a file when `create` is False."""
    url = storage_url(spec, run_dir)
    if not create and spec.storage is None and not _has_study_file(run_dir):
        raise InputError(f"{run_dir}: no {STUDY_FILE} (not a finished or running tune folder)")
    if url.startswith("journal:") and Path(url.removeprefix("journal:")).is_dir():
        raise InputError(f"--storage {url}: is a folder; name a journal file (journal:FILE)")
    storage = search.make_storage(url)
    sampler = search.make_sampler(
        spec.sampler, seed=spec.seed, space=spec.space, ctx=spec.context()
    )
    if not create:
        try:
            return optuna.load_study(study_name=spec.study_name, storage=storage, sampler=sampler)
        except KeyError as exc:
            raise InputError(f"{run_dir}: no study {spec.study_name!r} in its storage") from exc
    study = search.create_study(
        storage, spec.study_name, spec.sla, sampler, capacity=spec.is_capacity
    )
    bind_spec(study, spec, url)  # refuses a study made for other inputs
    # The first process keeps --seed (a repeat proposes the same variants); joiners differ.
    number = claim_worker_number(study)
    if number:
        study.sampler = search.make_sampler(
            spec.sampler, seed=spec.seed + number, space=spec.space, ctx=spec.context()
        )
    return study


def _objective_getter(index: int, maximize: bool) -> Callable[[FrozenTrial], float]:
    sign = -1.0 if maximize else 1.0  # PED-ANOVA explains what makes the target *low*

    def value(trial: FrozenTrial) -> float:
        return sign * float(trial.values[index])

    return value


def importances(
    study: optuna.Study, names: list[str], maximize: list[bool]
) -> dict[str, dict[str, float]]:
    """PED-ANOVA importance of each knob per objective (empty when too few trials)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < 2:
        return {}
    out: dict[str, dict[str, float]] = {}
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    for i, name in enumerate(names):
        try:
            # The getter already negates maximised objectives, and the importances are a hint
            # in the report: Optuna's reminders (low targets, few trials per regime, equal
            # quantiles) would only be noise on the user's terminal.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scores = optuna.importance.get_param_importances(
                    study, evaluator=evaluator, target=_objective_getter(i, maximize[i])
                )
        except (RuntimeError, ValueError):  # e.g. a single distinct value per knob
            continue
        out[name] = {k: float(v) for k, v in scores.items()}
    return out


@contextmanager
def readable_study(where: Path) -> Iterator[None]:
    """Turn a study whose stored JSON is corrupted (hand-edited, truncated) into one line."""
    try:
        yield
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: the study's stored trials are corrupted ({exc.msg}); start a new run folder"
        ) from exc


def _analyse_and_write(
    spec: RunSpec, study: optuna.Study, run_dir: Path
) -> tuple[AnalysedRun, dict[str, Path]]:
    with readable_study(run_dir):
        records = search.records(study)
    result = analyze(records, spec.sla, capacity=spec.is_capacity)
    importance = importances(study, result.objective_names, result.maximize)
    analysed = analyse_run(spec, records, result, importance)
    files = write_outputs(analysed, run_dir)
    url = storage_url(spec, run_dir)
    if url.startswith("sqlite:///"):
        files["study"] = Path(url.removeprefix("sqlite:///"))
    elif url.startswith("journal:"):
        files["study"] = Path(url.removeprefix("journal:"))
    return analysed, files


def check_run_dir(spec: RunSpec, run_dir: Path) -> None:
    """Refuse to write `spec` into a folder that already holds a different run."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: is a file; the run folder must be a folder")
    if not (run_dir / RUN_FILE).exists():
        found = [name for name in STUDY_FILES if (run_dir / name).exists()]
        if found:
            raise InputError(
                f"{run_dir}: holds a {found[0]} but no {RUN_FILE}; choose another --run-dir"
            )
        return
    remedy = f"choose another --run-dir, or continue that run with --resume {run_dir}"
    check_same_run(load_run_spec(run_dir), spec, str(run_dir), remedy)


def _finished_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def run_backend(spec: RunSpec, run_dir: Path) -> Backend:
    """The run's backend, with a vLLM server's logs in RUN/vllm-logs."""
    options = dict(spec.backend_options)
    if spec.backend == "vllm":
        # Server logs belong with the run they explain, not in a temp folder.
        options.setdefault("run_dir", str(run_dir / "vllm-logs"))
    return get_backend(spec.backend, **options)


def run_evaluator(spec: RunSpec, backend: Backend) -> search.Evaluator:
    """The evaluator of the run's trials on `backend` (a capacity search in capacity mode)."""
    return search.Evaluator(
        backend,
        spec.context(),
        spec.space,
        spec.drafts,
        metrics_key=spec.metrics_key(),
        capacity=spec.capacity_load if spec.is_capacity else None,
        budget=spec.probe_budget,
    )


def _start(spec: RunSpec, run_dir: Path, resume: bool) -> tuple[optuna.Study, search.Evaluator]:
    """Build the backend, write run.yaml, open the study: everything before the first trial."""
    backend = run_backend(spec, run_dir)
    make_run_dir(run_dir)
    study = open_study(spec, run_dir, create=True)  # before run.yaml: it may refuse the study
    if not resume:
        (run_dir / RUN_FILE).write_text(spec.to_yaml())
    return study, run_evaluator(spec, backend)


def _search(
    spec: RunSpec,
    run_dir: Path,
    study: optuna.Study,
    evaluator: search.Evaluator,
    jobs: int,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None,
) -> tuple[list[str], list[int]]:
    """Evaluate trials here (and in jobs-1 worker processes) until the study's budget is met;
    the worker errors and the refinement trials (tuner.run.refine)."""
    url = storage_url(spec, run_dir)
    with LocalWorkers(url, spec.study_name, jobs - 1, run_dir / "workers") as workers:
        # Alone on its study, this process samples up to the refinement reserve, refines, then
        # fills what is left; a shared study's other processes would race for the reserve.
        alone = jobs == 1 and spec.storage is None
        keep, started = (reserved(spec) if alone else 0), time.monotonic()
        run_trials(
            study,
            evaluator,
            budget=lambda: read_budget(study, spec.trials) - keep,
            timeout_s=spec.timeout_s,
            callbacks=callbacks or (),
        )
        refined = refine(spec, study, evaluator, read_budget(study, spec.trials)) if keep else []
        left = None if spec.timeout_s is None else spec.timeout_s - (time.monotonic() - started)
        run_trials(
            study,
            evaluator,
            budget=lambda: read_budget(study, spec.trials),
            timeout_s=None if left is None else max(0.0, left),
            callbacks=callbacks or (),
        )
    return workers.errors, refined


def _write_after_search(
    spec: RunSpec, study: optuna.Study, run_dir: Path
) -> tuple[AnalysedRun, dict[str, Path]]:
    try:
        return _analyse_and_write(spec, study, run_dir)
    except KeyboardInterrupt:
        raise InterruptedRunError(
            f"interrupted while writing {run_dir}: its report, CSVs and exports are incomplete; "
            f"the trials are kept in the study, rebuild them with `tuner report {run_dir}`"
        ) from None


def tune(
    spec: RunSpec,
    run_dir: Path,
    *,
    resume: bool = False,
    fresh: bool = False,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
    jobs: int = 1,
) -> TuneOutcome:
    """Run (or resume) the search and write the run folder; Ctrl-C keeps the finished trials.

    `fresh` says the caller created `run_dir` for this run: a run that fails before any trial
    finishes removes it again, so a failed tune leaves no empty folder behind. `jobs` - 1 worker
    processes join the study; one process at a time holds a run folder.
    """
    if not resume:
        check_run_dir(spec, run_dir)
    created = fresh or not run_dir.exists()
    make_run_dir(run_dir)
    with run_folder_lock(run_dir):
        return _tune_locked(spec, run_dir, resume, created, callbacks, jobs)


def _tune_locked(
    spec: RunSpec,
    run_dir: Path,
    resume: bool,
    created: bool,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None,
    jobs: int,
) -> TuneOutcome:
    started = time.perf_counter()
    try:
        study, evaluator = _start(spec, run_dir, resume)
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    requeue = RequeueOnce()
    with readable_study(run_dir), study_lock(study._storage, study.study_name):  # noqa: SLF001
        reap_dead_trials(study, requeue)  # trials of a killed earlier run, queued again
    stopped, errors, refined = False, list[str](), list[int]()
    try:
        with readable_study(run_dir):
            errors, refined = _search(spec, run_dir, study, evaluator, jobs, callbacks)
    except KeyboardInterrupt:
        stopped = True
        hand_back_running(study, requeue)
    except BaseException:
        if created and _finished_trials(study) == 0:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    if stopped and created and _finished_trials(study) == 0:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise InterruptedRunError(f"interrupted before any trial finished; removed {run_dir}")
    analysed, files = _write_after_search(spec, study, run_dir)
    if stopped:
        raise InterruptedRunError(
            f"interrupted; {_finished_trials(study)} finished trials are kept and written to "
            f"{run_dir}; continue with `tuner tune --resume {run_dir}`"
        )
    return TuneOutcome(
        spec=spec,
        run_dir=run_dir,
        records=analysed.records,
        result=analysed.result,
        files=files,
        analysed=analysed,
        evaluations=evaluator.evaluations,
        wall_s=time.perf_counter() - started,
        interrupted_trials=requeue.failed,
        worker_errors=errors,
        refinement_trials=refined,
    )


def rebuild(run_dir: Path) -> TuneOutcome:
    """Re-read a run folder's study and rewrite its report, CSVs, best.yaml and exports."""
    started = time.perf_counter()
    spec = load_run_spec(run_dir)
    study = open_study(spec, run_dir, create=False)
    # The study records the inputs its trials were measured under: a run.yaml replaced since
    # (another run's, or edited) would relabel them, so it is refused as a resume would be.
    remedy = f"{run_dir / RUN_FILE} is not the run's own; put back the run.yaml it was run with"
    check_study_spec(study, spec, storage_url(spec, run_dir), remedy)
    analysed, files = _analyse_and_write(spec, study, run_dir)
    return TuneOutcome(
        spec,
        run_dir,
        analysed.records,
        analysed.result,
        files,
        analysed,
        wall_s=time.perf_counter() - started,
    )


def require_recommendation(outcome: TuneOutcome) -> int:
    """The recommended trial number, or NoFeasibleConfigError with the closest misses."""
    if outcome.result.recommended is None:
        # Every variant failing because the backend itself could not run is exit 4, not 3.
        ran = [r.metrics for r in outcome.records if r.metrics is not None]
        if ran and all(m.extra.get(BACKEND_FAILED) for m in ran):
            raise BackendError(f"the {outcome.spec.backend} backend could not run: {ran[0].reason}")
        finished = sum(r.state in ("complete", "pruned") for r in outcome.records)
        raise NoFeasibleConfigError(no_feasible_message(outcome.result, outcome.spec.sla, finished))
    return outcome.result.recommended
