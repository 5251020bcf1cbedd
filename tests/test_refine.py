"""Local refinement after the search: the pick steps to its best one-knob neighbour."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.explain.sensitivity import knob_sensitivity
from tuner.run.refine import MAX_STEPS, MIN_GAIN_PCT, refine, reserved
from tuner.run.tune import tune
from tuner.run_spec import build_run_spec


def test_the_default_tune_ends_on_a_pick_no_one_knob_neighbour_beats(tmp_path: Path) -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm", sla="chat", trials=30)
    outcome = tune(spec, tmp_path / "run")
    steps = outcome.refinement_trials
    assert 1 <= len(steps) <= reserved(spec) == MAX_STEPS
    # The last trials of the budget: the sampler ran first, and any unused reserve after.
    assert len(outcome.records) == 30
    assert steps == list(range(30 - MAX_STEPS, 30 - MAX_STEPS + len(steps)))
    rec = next(r for r in outcome.records if r.number == outcome.result.recommended)
    assert rec.config is not None
    if len(steps) < MAX_STEPS:  # it stopped because no untried neighbour gains
        tried = [r.config for r in outcome.records]
        effects = knob_sensitivity(rec.config, spec.context(), spec.space, spec.capacity_load)
        for e in effects:
            if (e.change_pct or 0) > MIN_GAIN_PCT:
                moved = rec.config.model_copy(update={e.knob: e.value})
                assert moved in tried, e
    # The refined pick is at least as good as the best the sampler found on its own.
    sampled = [r for r in outcome.records if r.number not in steps and r.capacity is not None]
    best_sampled = max(r.capacity.rps_per_gpu for r in sampled if r.capacity)
    assert rec.capacity is not None and rec.capacity.rps_per_gpu >= best_sampled


@pytest.mark.unit
def test_a_measured_or_fixed_load_run_is_not_refined() -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm", sla="chat", trials=4)
    measured = spec.model_copy(update={"backend": "torch"})
    fixed = spec.model_copy(update={"mode": "fixed"})
    # Neither reserves a trial nor reaches the study: a measured neighbour would be an engine
    # start ranked by a prediction (the screened tune), a fixed load has no capacity to rank.
    assert reserved(measured) == reserved(fixed) == 0 and reserved(spec) == 0  # 4 trials: none
    assert refine(measured, None, None, 4) == []  # type: ignore[arg-type]
    assert refine(fixed, None, None, 4) == []  # type: ignore[arg-type]
