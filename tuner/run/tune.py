"""`tuner tune` as a library call: open the study, search, analyse, write the run folder."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.backends import get_backend
from tuner.errors import InputError, NoFeasibleConfigError
from tuner.run.folder import write_outputs
from tuner.run.spec import RUN_FILE, RunSpec, load_run_spec
from tuner.search import study as search
from tuner.search.pareto import ParetoResult, analyze, no_feasible_message
from tuner.search.trials import TrialRecord

__all__ = [
    "TuneOutcome",
    "importances",
    "open_study",
    "rebuild",
    "require_recommendation",
    "storage_url",
    "tune",
]

STUDY_FILE = "study.db"


@dataclass
class TuneOutcome:
    """What a finished (or rebuilt) run produced."""

    spec: RunSpec
    run_dir: Path
    records: list[TrialRecord]
    result: ParetoResult
    files: dict[str, Path]
    evaluations: int = 0
    wall_s: float = 0.0
    interrupted_trials: list[int] | None = None


def storage_url(spec: RunSpec, run_dir: Path) -> str:
    """The run's Optuna storage: --storage, else study.db in the run folder."""
    return spec.storage or f"sqlite:///{(run_dir / STUDY_FILE).resolve()}"


def open_study(spec: RunSpec, run_dir: Path, *, create: bool) -> optuna.Study:
    """Create or join the run's study (same name, same objectives)."""
    storage = search.make_storage(storage_url(spec, run_dir))
    sampler = search.make_sampler(spec.sampler, seed=spec.seed, space=spec.space)
    if not create:
        try:
            return optuna.load_study(study_name=spec.study_name, storage=storage, sampler=sampler)
        except KeyError as exc:
            raise InputError(f"{run_dir}: no study {spec.study_name!r} in its storage") from exc
    return search.create_study(storage, spec.study_name, spec.sla, sampler,
                               capacity=spec.is_capacity)  # fmt: skip


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
            # The getter already negates maximised objectives, so Optuna's reminder that
            # PED-ANOVA ranks low target values is noise here.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator")
                scores = optuna.importance.get_param_importances(
                    study, evaluator=evaluator, target=_objective_getter(i, maximize[i])
                )
        except (RuntimeError, ValueError):  # e.g. a single distinct value per knob
            continue
        out[name] = {k: float(v) for k, v in scores.items()}
    return out


def _analyse_and_write(
    spec: RunSpec, study: optuna.Study, run_dir: Path
) -> tuple[list[TrialRecord], ParetoResult, dict[str, Path]]:
    records = search.records(study)
    result = analyze(records, spec.sla, capacity=spec.is_capacity)
    files = write_outputs(
        spec, records, result, run_dir, importances(study, result.objective_names, result.maximize)
    )
    files["study"] = run_dir / STUDY_FILE
    return records, result, files


def tune(
    spec: RunSpec,
    run_dir: Path,
    *,
    resume: bool = False,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
) -> TuneOutcome:
    """Run (or resume) the search and write the run folder; KeyboardInterrupt keeps the work."""
    started = time.perf_counter()
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        (run_dir / RUN_FILE).write_text(spec.to_yaml())
    study = open_study(spec, run_dir, create=True)
    interrupted = search.fail_interrupted_trials(study) if resume else []
    options = dict(spec.backend_options)
    if spec.backend == "vllm":
        # Server logs belong with the run they explain, not in a temp folder.
        options.setdefault("run_dir", str(run_dir / "vllm-logs"))
    backend = get_backend(spec.backend, **options)
    evaluator = search.Evaluator(
        backend, spec.context(), spec.space, spec.drafts,
        capacity=spec.capacity_load if spec.is_capacity else None, budget=spec.probe_budget,
    )  # fmt: skip
    try:
        search.optimize(
            study, evaluator, trials=spec.trials, timeout_s=spec.timeout_s, callbacks=callbacks
        )
    finally:
        # Ctrl-C still leaves a complete run folder for the trials that finished.
        records, result, files = _analyse_and_write(spec, study, run_dir)
    return TuneOutcome(
        spec=spec,
        run_dir=run_dir,
        records=records,
        result=result,
        files=files,
        evaluations=evaluator.evaluations,
        wall_s=time.perf_counter() - started,
        interrupted_trials=interrupted,
    )


def rebuild(run_dir: Path) -> TuneOutcome:
    """Re-read a run folder's study and rewrite its report, CSVs, best.yaml and exports."""
    started = time.perf_counter()
    spec = load_run_spec(run_dir)
    study = open_study(spec, run_dir, create=False)
    records, result, files = _analyse_and_write(spec, study, run_dir)
    return TuneOutcome(spec, run_dir, records, result, files, 0, time.perf_counter() - started)


def require_recommendation(outcome: TuneOutcome) -> int:
    """The recommended trial number, or NoFeasibleConfigError with the closest misses."""
    if outcome.result.recommended is None:
        finished = sum(r.state in ("complete", "pruned") for r in outcome.records)
        raise NoFeasibleConfigError(no_feasible_message(outcome.result, outcome.spec.sla, finished))
    return outcome.result.recommended
