"""Local refinement: after the sampler's budget, step from the pick to its best one-knob neighbour.

A 30-trial TPE search over ten knobs samples few points near any one corner: on llama-3.1-8b /
h200-sxm / chat it recommended fp16 at TP 2, while its own one-knob sensitivity showed TP 1 and
fp8 weights each worth +27%. Each refinement step asks the simulator for the pick's neighbours
(the sensitivity of tuner.explain), enqueues the best one that gains more than MIN_GAIN_PCT as a
real trial of the study (so it is recorded, ranked and exported like any other), and repeats
from the new pick. The steps are the last trials of --trials (a fifth, at most MAX_STEPS; what
they leave unused goes back to the sampler), only in a process alone on its study (no --jobs,
no --storage), and only where the backend is the simulator: a measured neighbour would be an
engine start ranked by a prediction, which is the screened tune.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.explain.sensitivity import KnobEffect, knob_sensitivity
from tuner.knobs import searched
from tuner.run_spec import RunSpec
from tuner.search import study as search
from tuner.search.parallel import Objective, run_trials
from tuner.search.pareto import analyze
from tuner.search.study import config_from_params
from tuner.search.trials import TrialRecord

__all__ = ["MAX_STEPS", "MIN_GAIN_PCT", "refine", "reserved"]

MAX_STEPS = 4
# A neighbour must predict this much more capacity to be worth a trial (noise is below 1%).
MIN_GAIN_PCT = 1.0
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def _neighbour_params(rec: TrialRecord, e: KnobEffect) -> dict[str, Any]:
    """The trial parameters of `rec` with one knob moved (conditional knobs whose switch turns
    off are dropped, as the sampler would not ask them)."""
    params = {**rec.params, e.knob: e.value}
    for knob in searched():
        if knob.needs and not params.get(knob.needs):
            params.pop(knob.name, None)
    return params


def _next_step(spec: RunSpec, records: list[TrialRecord]) -> dict[str, Any] | None:
    """The parameters of the best untried neighbour of the current pick that gains, or None."""
    result = analyze(records, spec.sla, capacity=True)
    rec = next((r for r in records if r.number == result.recommended), None)
    if rec is None or rec.config is None:
        return None
    seen = [r.config for r in records if r.config is not None]
    effects = knob_sensitivity(rec.config, spec.context(), spec.space, spec.capacity_load)
    gains = sorted(
        (e for e in effects if (e.change_pct or 0.0) > MIN_GAIN_PCT),
        key=lambda e: -(e.change_pct or 0.0),
    )
    for e in gains:
        params = _neighbour_params(rec, e)
        if config_from_params(dict(params)) not in seen:
            return params
    return None


def _fixed(n: int) -> Callable[[], int]:
    return lambda: n


def reserved(spec: RunSpec) -> int:
    """Trials of the --trials budget kept for refinement: a fifth, at most MAX_STEPS; none on
    a measured backend, in fixed-load mode or below 5 trials."""
    if spec.backend != "sim" or not spec.is_capacity:
        return 0
    return min(MAX_STEPS, spec.trials // 5)


def refine(spec: RunSpec, study: optuna.Study, objective: Objective, budget: int) -> list[int]:
    """Refinement trials while the study holds fewer than `budget` finished ones, up to
    `reserved(spec)` of them; their numbers (the caller fills what is left with the sampler)."""
    numbers: list[int] = []
    for step in range(reserved(spec)):
        finished = len(study.get_trials(deepcopy=False, states=_FINISHED))
        if finished >= budget:
            break  # other processes of a shared study spent the reserve on sampled trials
        params = _next_step(spec, search.records(study))
        if params is None:
            break
        study.enqueue_trial(params, user_attrs={"refinement_step": step + 1})
        run_trials(study, objective, budget=_fixed(finished + 1), max_trials=1)
        numbers.append(max(t.number for t in study.get_trials(deepcopy=False)))
    return numbers
