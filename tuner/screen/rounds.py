"""Re-screen from measurements: the rounds of a screened tune after the first.

A screen with a wrong device profile ranks noise (issue 34: 26x off on vLLM-CPU), so measuring
its top K once is a lottery. After each round of measurements the device profile is refitted to
every measurement so far (`tuner.calibrate.refit`, from the profile the screen used), the
screen's variants are predicted again with it, and the best K distinct ones not measured yet
are measured: variants the refitted simulator predicts the same as one already measured or
picked (neither token budget binds, say) count as one and are skipped. The loop stops when a
round did not raise the measured best, when `--rounds` rounds ran, when `--confirm-seconds`
is spent, or when the re-ranked screen has nothing distinct left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.backends import Backend, evaluate_capacity
from tuner.backends.sim import SimBackend
from tuner.calibrate.refit import refit_profile
from tuner.perf.load import Capacity
from tuner.run_spec import RunSpec
from tuner.screen.candidates import Twins, pick_candidates
from tuner.screen.journal import restore_measured
from tuner.screen.measure import recommend_measured
from tuner.screen.options import ScreenOptions, screen_spec
from tuner.screen.refit import error_moved, median_errors, observations
from tuner.screen.variant import ConfirmedVariant, config_key
from tuner.search.trials import TrialRecord
from tuner.specs import EngineConfig

__all__ = [
    "Rounds",
    "best_capacity",
    "more_rounds",
    "predicted_twins",
    "rerank",
    "restored",
    "twins_note",
]


def _predicted(config: EngineConfig, spec: RunSpec) -> Capacity:
    """The simulator's capacity of `config` with `spec.gpu`, under the screen's probe budget."""
    budget = screen_spec(spec).probe_budget
    cap, _ = evaluate_capacity(
        SimBackend(), config, spec.context(), mode=spec.capacity_load, budget=budget
    )
    return cap


def rerank(records: list[TrialRecord], spec: RunSpec) -> list[TrialRecord]:
    """The screen's distinct variants (its first trial of each) with the capacity the simulator
    predicts with `spec.gpu`: the screen's search space as explored, ranked afresh."""
    budget = screen_spec(spec).probe_budget
    sim, ctx, seen, out = SimBackend(), spec.context(), set[str](), list[TrialRecord]()
    for r in records:
        if r.config is None or config_key(r.config) in seen:
            continue
        seen.add(config_key(r.config))
        cap, metrics = evaluate_capacity(sim, r.config, ctx, mode=spec.capacity_load, budget=budget)
        update = {"state": "complete", "capacity": cap, "metrics": metrics, "duplicate_of": None}
        out.append(r.model_copy(update={**update, "reason": metrics.reason}))
    return out


def predicted_twins(variants: list[ConfirmedVariant], spec: RunSpec) -> Twins:
    """Twins seeded with what the simulator (with `spec.gpu`) predicts for `variants`."""
    twins = Twins(spec.sla.percentile)
    for v in variants:
        twins.add(_predicted(v.config, spec), v.label)
    return twins


def restored(
    picks: list[ConfirmedVariant], done: dict[str, ConfirmedVariant]
) -> list[ConfirmedVariant]:
    """`picks`, each one the journal holds replaced by its earlier measurement."""
    keys = {config_key(v.config) for v in picks}
    return restore_measured(picks, {k: v for k, v in done.items() if k in keys})


def best_capacity(variants: list[ConfirmedVariant]) -> float | None:
    """The highest measured capacity (output tok/s per GPU at the SLA), None when none met it."""
    best = recommend_measured(variants)
    return None if best is None or best.measured is None else best.measured.capacity_tok_s_per_gpu


@dataclass
class Rounds:
    """What the later rounds need: the run, the screen's trials, the journal, the budget."""

    spec: RunSpec
    options: ScreenOptions
    backend: Backend
    records: list[TrialRecord]
    done: dict[str, ConfirmedVariant]  # the journal of an interrupted run, by knobs
    measure: Callable[[list[ConfirmedVariant]], None]  # within what the time budget has left
    spent: Callable[[], bool]  # whether the time budget is spent
    say: Callable[[str], None] = lambda line: None


def _spent(run: Rounds, number: int) -> str:
    seconds = run.options.confirm_seconds
    return f"stopped after round {number}: the --confirm-seconds budget ({seconds:g} s) was spent"


def _fmt(x: float | None) -> str:
    return "nothing met the SLA" if x is None else f"{x:,.1f} output tok/s per GPU"


def _next_round(variants: list[ConfirmedVariant], run: Rounds, number: int) -> tuple[
    list[ConfirmedVariant], str
]:  # fmt: skip
    """Round `number`'s picks from the screen re-ranked by the refitted simulator, and what the
    refit did (ValueError when nothing measured can be fitted)."""
    spec, obs = run.spec, observations(variants, run.spec)
    refitted = refit_profile(spec.gpu, spec.model, obs)
    fitted = spec.model_copy(update={"gpu": refitted})
    moved = error_moved(median_errors(spec.gpu, spec, obs), median_errors(refitted, spec, obs))
    twins = predicted_twins(variants, fitted)
    picks, passed = pick_candidates(
        rerank(run.records, fitted),
        fitted,
        run.backend,
        run.options.confirm,
        variants[0].config,
        exclude=[v.config for v in variants],
        twins=twins,
        round_number=number,
    )
    note = f"refitted to {len(obs)} measurements ({moved})"
    note += f"; passed over: {'; '.join(passed)}" if passed else ""
    return picks, note + twins_note(twins)


def twins_note(twins: Twins) -> str:
    """'; skipped as predicted twins: trial 3 (rank 2) as rank 1, ...' ('' when none was)."""
    return f"; skipped as predicted twins: {', '.join(twins.skipped)}" if twins.skipped else ""


def more_rounds(variants: list[ConfirmedVariant], run: Rounds) -> list[str]:
    """Measure rounds 2 to `--rounds` (appending their variants to `variants`, the first round
    measured); one line per round and a last one saying why the loop stopped."""
    notes: list[str] = []
    for number in range(2, run.options.rounds + 1):
        if run.spent():
            return [*notes, _spent(run, number - 1)]
        before = best_capacity(variants)
        try:
            picks, note = _next_round(variants, run, number)
        except ValueError as exc:  # nothing measured met a load the fit could use
            return [*notes, f"stopped after round {number - 1}: nothing to refit from ({exc})"]
        if not picks:
            return [*notes, f"stopped after round {number - 1}: the re-ranked screen has no "
                    f"distinct unmeasured variant left ({note})"]  # fmt: skip
        picks = restored(picks, run.done)
        run.say(f"round {number}: {note}; measuring {', '.join(p.label for p in picks)}")
        variants.extend(picks)
        run.measure(picks)
        after = best_capacity(variants)
        notes.append(f"round {number}: {note}; measured best {_fmt(before)} -> {_fmt(after)}")
        # A round the time budget cut short is not judged: the next check says why it stops.
        if not run.spent() and (after is None or (before is not None and after <= before)):
            return [*notes, f"stopped after round {number}: it did not improve the measured best"]
    rounds = run.options.rounds
    if run.spent():
        return [*notes, _spent(run, rounds)]
    return [*notes, f"stopped after round {rounds}: the --rounds budget ({rounds}) was spent"]
