"""The Optuna study: sample EngineConfigs from a SearchSpace, evaluate them, record constraints.

Objectives and constraints come from `tuner.search.objectives`; Optuna's constraint convention
(`trial.set_constraint`, <= 0 feasible) lets SLA misses and out-of-memory variants steer the
sampler instead of being dropped. Invalid combinations are pruned before evaluation with the
reason kept as a trial attribute; duplicate variants reuse the first evaluation.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import optuna
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, Trial, TrialState
from pydantic import ValidationError

from tuner.backends import Backend, evaluate_capacity
from tuner.backends.base import refusal
from tuner.errors import InputError
from tuner.knobs import searched
from tuner.knobs.rules import config_reason
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.search.objectives import constraint_names, constraint_values, objectives_for
from tuner.search.parallel import run_trials
from tuner.search.storage import make_storage
from tuner.search.trials import (
    ATTR_CAPACITY,
    ATTR_CONFIG,
    ATTR_DUPLICATE_OF,
    ATTR_METRICS,
    ATTR_METRICS_KEY,
    ATTR_REASON,
    TrialRecord,
    record_from_frozen,
)
from tuner.specs import (
    DEFAULT_SAMPLER,
    SAMPLERS,
    Context,
    EngineConfig,
    IntRange,
    Metrics,
    ModelSpec,
    SearchSpace,
    is_model_draft,
)
from tuner.validity import allowed_values

__all__ = [
    "DEFAULT_SAMPLER",
    "SAMPLERS",
    "Evaluator",
    "config_from_params",
    "create_study",
    "grid_values",
    "make_sampler",
    "make_storage",
    "optimize",
    "records",
    "sampling_space",
    "record_from_frozen",
    "suggest_params",
]

# DEFAULT_SAMPLER and SAMPLERS live with the nouns (tuner.specs), where run specs read them.
# Random trials before TPE models the space: Optuna's default for TPE.
STARTUP_TRIALS = 10
# NSGA-II generation size: small enough that 100-trial budgets see several generations.
NSGA2_POPULATION = 20
# Grid search keeps at most this many values of an integer range (evenly spaced, ends kept).
GRID_POINTS_PER_RANGE = 8


def _choices(values: Iterable[Any]) -> list[Any]:
    return [getattr(v, "value", v) for v in values]


def sampling_space(space: SearchSpace, ctx: Context | None = None) -> dict[str, Any]:
    """Each searched knob's values as the sampler sees them: lists filtered by the validity
    rules that read only that knob (fp8 without FP8 math, TP beyond --num-gpus...)."""
    out: dict[str, Any] = {}
    for knob in searched():
        spec = getattr(space, knob.name)
        if ctx is not None and not isinstance(spec, IntRange):
            kept, dropped = allowed_values(knob.name, spec, ctx)
            if not kept:
                raise InputError(
                    f"space {space.name!r}: no {knob.name} value can run here "
                    f"({'; '.join(dropped)})"
                )
            spec = kept
        out[knob.name] = spec
    return _conditioned(out)


def _conditioned(out: dict[str, Any]) -> dict[str, Any]:
    """A knob that `needs` another is sampled only above its default ("off") value; with no
    such value the knob it needs keeps only its off values too."""
    for knob in searched():
        spec = out[knob.name]
        if not knob.needs:
            continue
        on: IntRange | list[Any] | None
        if isinstance(spec, IntRange):
            low = max(spec.low, int(knob.default) + 1)
            on = spec.model_copy(update={"low": low}) if low <= spec.high else None
        else:
            on = [v for v in spec if v != knob.default] or None
        out[knob.name] = on
        if on is None:
            out[knob.needs] = [v for v in out[knob.needs] if not v] or [None]
    return out


def suggest_params(trial: Trial, space: dict[str, Any]) -> dict[str, Any]:
    """Ask the trial for one value of each knob of a `sampling_space`; a knob whose `needs` is
    off is not asked (define-by-run), so it keeps its default."""
    params: dict[str, Any] = {}
    for knob in searched():
        spec = space[knob.name]
        if spec is None or (knob.needs and not params.get(knob.needs)):
            continue
        if isinstance(spec, IntRange):
            step = None if spec.log else spec.step
            params[knob.name] = trial.suggest_int(
                knob.name, spec.low, spec.high, step=step or 1, log=spec.log
            )
        else:
            params[knob.name] = trial.suggest_categorical(knob.name, _choices(spec))
    return params


def config_from_params(params: dict[str, Any]) -> EngineConfig | str:
    """The EngineConfig for sampled knob values, or the reason the combination is invalid."""
    reason = config_reason(EngineConfig.model_construct(None, **params))
    if reason:
        return reason
    # A draft with zero speculative tokens is the plain engine: the same variant as no draft.
    for knob in searched():
        if knob.needs and params.get(knob.name, knob.default) == knob.default:
            params = {**params, knob.needs: None}
    try:
        return EngineConfig(**params)
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


def make_sampler(
    name: str, *, seed: int, space: SearchSpace, ctx: Context | None = None
) -> BaseSampler:
    """A seeded Optuna sampler by name (constraints are read from trial.set_constraint)."""
    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, n_startup_trials=STARTUP_TRIALS
        )
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=NSGA2_POPULATION)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        conditioned = sampling_space(space, ctx)
        grid = {k: grid_values(v) for k, v in conditioned.items() if v is not None}
        return optuna.samplers.GridSampler(grid, seed=seed)
    raise InputError(f"unknown sampler {name!r}; allowed: {', '.join(SAMPLERS)}")


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
        self.sampling = sampling_space(space, ctx)
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
        if is_model_draft(config.draft_model):
            return self.ctx.model_copy(update={"draft": self.drafts[str(config.draft_model)]})
        return self.ctx

    def _evaluate(self, config: EngineConfig) -> tuple[dict[str, Any], Any]:
        """Backend call: Metrics JSON, plus the capacity search JSON in capacity mode."""
        ctx = self._context_for(config)
        self.evaluations += 1
        if self.capacity is None:
            return self.backend.evaluate(config, ctx).model_dump(mode="json"), None
        cap: Capacity
        cap, metrics = evaluate_capacity(
            self.backend, config, ctx, mode=self.capacity, budget=self.budget
        )
        return metrics.model_dump(mode="json"), cap.model_dump(mode="json")

    def __call__(self, trial: Trial) -> list[float]:
        """Evaluate one sampled variant and return its objective values."""
        params = suggest_params(trial, self.sampling)
        config = config_from_params(params)
        reason = config if isinstance(config, str) else refusal(config, self.ctx)
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


def optimize(
    study: optuna.Study,
    evaluator: Evaluator,
    *,
    trials: int,
    timeout_s: float | None = None,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
) -> None:
    """Run trials until the study holds `trials` finished ones (shared with other workers)."""
    run_trials(
        study, evaluator, budget=lambda: trials, timeout_s=timeout_s, callbacks=callbacks or ()
    )


def records(study: optuna.Study) -> list[TrialRecord]:
    """Every trial of the study as plain TrialRecords, in trial-number order."""
    return [record_from_frozen(t) for t in study.get_trials(deepcopy=False)]
