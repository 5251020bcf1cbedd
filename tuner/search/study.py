"""The Optuna study: sample EngineConfigs from a SearchSpace, evaluate them, record constraints.

Objectives and constraints come from `tuner.search.objectives`; Optuna's constraint convention
(`trial.set_constraint`, <= 0 feasible) lets SLA misses and out-of-memory variants steer the
sampler instead of being dropped. Invalid combinations are pruned before evaluation with the
reason kept as a trial attribute; duplicate variants reuse the first evaluation.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import optuna
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, Trial, TrialState
from pydantic import ValidationError

from tuner.backends import Backend, evaluate_capacity
from tuner.errors import InputError
from tuner.perf.capacity import Capacity, LoadMode, ProbeBudget
from tuner.search.objectives import constraint_names, constraint_values, objectives_for
from tuner.search.trials import (
    ATTR_CAPACITY,
    ATTR_CONFIG,
    ATTR_DUPLICATE_OF,
    ATTR_METRICS,
    ATTR_METRICS_KEY,
    ATTR_REASON,
    KNOBS,
    TrialRecord,
    record_from_frozen,
)
from tuner.specs import Context, EngineConfig, IntRange, Metrics, ModelSpec, SearchSpace
from tuner.validity import invalid_reason

__all__ = [
    "DEFAULT_SAMPLER",
    "SAMPLERS",
    "Evaluator",
    "config_from_params",
    "create_study",
    "fail_interrupted_trials",
    "grid_values",
    "make_sampler",
    "make_storage",
    "optimize",
    "records",
    "record_from_frozen",
    "suggest_params",
]

# Chosen by benchmarks/search_efficiency.py: % of the true Pareto hypervolume (mean of 5 seeds,
# 2016-variant enumerable space, llama-3.1-8b / h200-sxm / chat) at 25/50/100/200 trials:
#   tpe 78.1 / 98.0 / 99.5 / 100.0;  nsga2 63.7 / 78.8 / 91.9 / 99.6;
#   random 63.7 / 76.3 / 90.1 / 93.4
DEFAULT_SAMPLER = "tpe"
SAMPLERS: tuple[str, ...] = ("tpe", "nsga2", "random", "grid")
# Random trials before TPE models the space: Optuna's default for TPE.
STARTUP_TRIALS = 10
# NSGA-II generation size: small enough that 100-trial budgets see several generations.
NSGA2_POPULATION = 20
# Grid search keeps at most this many values of an integer range (evenly spaced, ends kept).
GRID_POINTS_PER_RANGE = 8

# Several workers opening one new RDB study race to create its tables: retry this often.
STORAGE_OPEN_ATTEMPTS = 5
STORAGE_RETRY_S = 0.5


def _choices(values: Iterable[Any]) -> list[Any]:
    return [getattr(v, "value", v) for v in values]


def suggest_params(trial: Trial, space: SearchSpace) -> dict[str, Any]:
    """Ask the trial for one value of every knob of the space (a flat, fixed search space)."""
    params: dict[str, Any] = {}
    for knob in KNOBS:
        spec = getattr(space, knob)
        if isinstance(spec, IntRange):
            step = None if spec.log else spec.step
            params[knob] = trial.suggest_int(knob, spec.low, spec.high, step=step or 1,
                                             log=spec.log)  # fmt: skip
        else:
            params[knob] = trial.suggest_categorical(knob, _choices(spec))
    return params


def config_from_params(params: dict[str, Any]) -> EngineConfig | str:
    """The EngineConfig for sampled knob values, or the reason the combination is invalid."""
    k = int(params.get("num_speculative_tokens", 0))
    draft = params.get("draft_model")
    if k and not draft:
        return f"num_speculative_tokens={k} without a draft model"
    # A draft with zero speculative tokens is the plain engine: the same variant as no draft.
    try:
        return EngineConfig(**{**params, "draft_model": draft if k else None})
    except ValidationError as exc:  # a space value no engine accepts (SearchSpace checks first)
        return "; ".join(str(e["msg"]) for e in exc.errors())


def _evenly(values: Sequence[int], n: int) -> list[int]:
    # A range is indexed, never materialised: a grid over 1..10**12 stays 8 values.
    if len(values) <= n:
        return list(values)
    idx = {round(i * (len(values) - 1) / (n - 1)) for i in range(n)}
    return [values[i] for i in sorted(idx)]


def grid_values(spec: Any) -> list[Any]:
    """The values a grid search tries for one knob (ranges thinned to GRID_POINTS_PER_RANGE)."""
    if not isinstance(spec, IntRange):
        return _choices(spec)
    if spec.log:
        powers = [2**i for i in range(int(math.log2(spec.high)) + 1) if 2**i >= spec.low]
        return _evenly(sorted({spec.low, *powers, spec.high}), GRID_POINTS_PER_RANGE)
    return _evenly(range(spec.low, spec.high + 1, spec.step), GRID_POINTS_PER_RANGE)


def make_sampler(name: str, *, seed: int, space: SearchSpace) -> BaseSampler:
    """A seeded Optuna sampler by name (constraints are read from trial.set_constraint)."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                          n_startup_trials=STARTUP_TRIALS)  # fmt: skip
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=NSGA2_POPULATION)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        grid = {k: grid_values(getattr(space, k)) for k in KNOBS}
        return optuna.samplers.GridSampler(grid, seed=seed)
    raise InputError(f"unknown sampler {name!r}; allowed: {', '.join(SAMPLERS)}")


def make_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage from a URL: any SQLAlchemy RDB URL, or `journal:PATH` (file journal)."""
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    last: Exception | None = None
    for attempt in range(STORAGE_OPEN_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(url)
        except (ImportError, ValueError) as exc:  # bad URL or missing DB driver: no retry
            raise InputError(f"cannot open storage {url!r}: {exc}") from exc
        except Exception as exc:  # SQLAlchemy OperationalError etc. (schema race, lock)
            last = exc
            # Workers started together race to create the schema; the loser retries.
            time.sleep(STORAGE_RETRY_S * (attempt + 1))
    raise InputError(f"cannot open storage {url!r}: {last}") from last


def create_study(
    storage: optuna.storages.BaseStorage | str | None,
    study_name: str,
    sla: Any,
    sampler: BaseSampler,
    *,
    load_if_exists: bool = True,
    capacity: bool = False,
) -> optuna.Study:
    """Create (or join) the study with one direction per objective of the SLA (and mode)."""
    objectives = objectives_for(sla, capacity=capacity)
    directions: list[Literal["minimize", "maximize"]] = [
        "maximize" if o.maximize else "minimize" for o in objectives
    ]
    study = optuna.create_study(
        storage=storage,
        study_name=study_name,
        sampler=sampler,
        directions=directions,
        load_if_exists=load_if_exists,
    )
    if [d.name.lower() for d in study.directions] != directions:
        raise InputError(
            f"study {study_name!r} exists with other objectives "
            f"({[d.name.lower() for d in study.directions]} vs {directions})"
        )
    if study.metric_names is None:
        with warnings.catch_warnings():  # set_metric_names is marked experimental since 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([o.name for o in objectives])
    return study


class Evaluator:
    """The Optuna objective: validate, deduplicate, evaluate with a backend, set constraints."""

    def __init__(
        self,
        backend: Backend,
        ctx: Context,
        space: SearchSpace,
        drafts: dict[str, ModelSpec] | None = None,
        metrics_key: str = "",
        *,
        capacity: LoadMode | None = None,
        budget: ProbeBudget | None = None,
    ) -> None:
        """`capacity` ("rate" or "users") searches each variant's capacity; None = fixed load."""
        self.backend = backend
        # Digest of the model/GPU/SLA/workload/backend the metrics were measured for: a cached
        # evaluation is reused only by trials with the same key, never across runs.
        self.metrics_key = metrics_key
        self.ctx = ctx
        self.space = space
        self.drafts = drafts or {}
        self.capacity = capacity
        self.budget = budget
        self.objectives = objectives_for(ctx.sla, capacity=capacity is not None)
        # key -> (first trial, metrics JSON, capacity JSON or None)
        self._cache: dict[tuple[object, ...], tuple[int, dict[str, Any], Any]] = {}
        self._seen: set[int] = set()
        self.evaluations = 0  # backend calls made by this process

    def _refresh_cache(self, study: optuna.Study) -> None:
        """Learn evaluations other processes (or an earlier run) stored in the study."""
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.number in self._seen:
                continue
            self._seen.add(t.number)
            attrs = t.user_attrs
            cfg, met = attrs.get(ATTR_CONFIG), attrs.get(ATTR_METRICS)
            if attrs.get(ATTR_METRICS_KEY, "") != self.metrics_key:
                continue  # measured for another model/GPU/SLA/workload/backend
            if cfg and met and attrs.get(ATTR_DUPLICATE_OF) is None:
                try:
                    key = EngineConfig.model_validate(cfg).key()
                    Metrics.model_validate(met)
                except (ValidationError, TypeError):
                    continue  # unreadable trial data is not reused
                self._cache.setdefault(key, (t.number, met, attrs.get(ATTR_CAPACITY)))

    def _context_for(self, config: EngineConfig) -> Context:
        if config.draft_model and config.draft_model != "ngram":
            return self.ctx.model_copy(update={"draft": self.drafts[config.draft_model]})
        return self.ctx

    def _evaluate(self, config: EngineConfig) -> tuple[dict[str, Any], Any]:
        """Backend call: Metrics JSON, plus the capacity search JSON in capacity mode."""
        ctx = self._context_for(config)
        self.evaluations += 1
        if self.capacity is None:
            return self.backend.evaluate(config, ctx).model_dump(mode="json"), None
        cap: Capacity
        cap, metrics = evaluate_capacity(self.backend, config, ctx, mode=self.capacity,
                                         budget=self.budget)  # fmt: skip
        return metrics.model_dump(mode="json"), cap.model_dump(mode="json")

    def __call__(self, trial: Trial) -> list[float]:
        """Evaluate one sampled variant and return its objective values."""
        params = suggest_params(trial, self.space)
        config = config_from_params(params)
        reason = config if isinstance(config, str) else invalid_reason(config, self.ctx)
        if reason is not None:
            trial.set_user_attr(ATTR_REASON, reason)
            raise optuna.TrialPruned(reason)
        assert isinstance(config, EngineConfig)
        trial.set_user_attr(ATTR_CONFIG, config.model_dump(mode="json"))
        trial.set_user_attr(ATTR_METRICS_KEY, self.metrics_key)
        key = config.key()
        if key not in self._cache:
            self._refresh_cache(trial.study)
        if key in self._cache:
            first, metrics_json, capacity_json = self._cache[key]
            trial.set_user_attr(ATTR_DUPLICATE_OF, first)
        else:
            metrics_json, capacity_json = self._evaluate(config)
            self._cache[key] = (trial.number, metrics_json, capacity_json)
        metrics = Metrics.model_validate(metrics_json)
        trial.set_user_attr(ATTR_METRICS, metrics_json)
        if capacity_json is not None:
            trial.set_user_attr(ATTR_CAPACITY, capacity_json)
        if not metrics.feasible:
            trial.set_user_attr(ATTR_REASON, metrics.reason)
        names = constraint_names(self.ctx.sla)
        for name, value in zip(names, constraint_values(metrics, self.ctx.sla), strict=True):
            trial.set_constraint(name, value)
        return [o.value(metrics) for o in self.objectives]


def _finished(study: optuna.Study) -> int:
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return len(done)


def fail_interrupted_trials(study: optuna.Study) -> list[int]:
    """Mark trials left RUNNING by a killed process as failed and queue their knobs again."""
    interrupted = []
    storage = study._storage  # noqa: SLF001  (Optuna exposes no public setter for this)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_user_attr(t._trial_id, ATTR_REASON, "interrupted; re-queued")  # noqa: SLF001
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)  # noqa: SLF001
        if t.params:
            study.enqueue_trial(t.params, skip_if_exists=False)
        interrupted.append(t.number)
    return interrupted


def optimize(
    study: optuna.Study,
    evaluator: Evaluator,
    *,
    trials: int,
    timeout_s: float | None = None,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
) -> None:
    """Run trials until the study holds `trials` finished ones (shared with other workers)."""
    remaining = trials - _finished(study)
    if remaining <= 0:
        return
    stop = optuna.study.MaxTrialsCallback(trials, states=(TrialState.COMPLETE, TrialState.PRUNED))
    study.optimize(
        evaluator,
        n_trials=remaining,
        timeout=timeout_s,
        callbacks=[stop, *(callbacks or [])],
        catch=(),
        gc_after_trial=False,
    )


def records(study: optuna.Study) -> list[TrialRecord]:
    """Every trial of the study as plain TrialRecords, in trial-number order."""
    return [record_from_frozen(t) for t in study.get_trials(deepcopy=False)]
