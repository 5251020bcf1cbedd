"""`tuner tune --screen sim --confirm K` as a library call: screen with the simulator, measure the
top-K plus the engine defaults on the real backend, then round by round the top-K of the screen
re-ranked by the simulator refitted to the measurements (`tuner.screen.rounds`); recommend from
the measurements only."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tuner.backends import Backend
from tuner.detect import MEASURING_BACKENDS
from tuner.errors import InputError, InterruptedRunError
from tuner.run.folder import make_run_dir
from tuner.run.lock import run_folder_lock
from tuner.run.tune import TuneOutcome, run_backend, tune
from tuner.run_spec import RUN_FILE, RunSpec
from tuner.screen.autocal import screen_profile
from tuner.screen.baseline import describe, engine_defaults
from tuner.screen.candidates import pick_candidates
from tuner.screen.journal import (
    JOURNAL_FILE,
    SCREEN_DIR,
    append_measured,
    read_measured,
    restore_measured,
    write_screened_run,
)
from tuner.screen.measure import gain_over_defaults, measure_variants, recommend_measured
from tuner.screen.noise import within_noise
from tuner.screen.options import ScreenOptions, screen_spec
from tuner.screen.outputs import (
    confirm_rows,
    write_best_measured,
    write_confirm_csv,
    write_confirm_yaml,
)
from tuner.screen.refit import RefitReport, refit_device
from tuner.screen.report import parity_figures, render_confirm_html
from tuner.screen.rounds import Rounds, more_rounds, predicted_twins, restored, twins_note
from tuner.screen.variant import ConfirmedVariant, config_key
from tuner.search.frontier import ranked_by_capacity

__all__ = ["ScreenedOutcome", "check_screened_run", "gain_text", "screened_tune"]

Callbacks = list[Callable[[optuna.Study, FrozenTrial], None]]
OnScreened = Callable[[TuneOutcome, list[ConfirmedVariant], list[str]], None]
OnVariant = Callable[[ConfirmedVariant], None]


@dataclass
class ScreenedOutcome:
    """What a screened tune produced."""

    spec: RunSpec
    options: ScreenOptions
    run_dir: Path
    screen: TuneOutcome
    baseline_source: str
    variants: list[ConfirmedVariant]
    passed_over: list[str]
    recommended: ConfirmedVariant | None
    gain: float | None
    files: dict[str, Path] = field(default_factory=dict)
    wall_s: float = 0.0
    refit: RefitReport | None = None
    refit_note: str | None = None  # why no refit was written
    noise: str | None = None  # why the best candidate is no better than the defaults within noise
    profile_note: str | None = None  # which device profile the screen used, and how old
    rounds: list[str] = field(default_factory=list)  # each round after the first, and the stop

    @property
    def baseline(self) -> ConfirmedVariant:
        """The engine-defaults variant (always the first measured)."""
        return self.variants[0]


def gain_text(outcome: ScreenedOutcome) -> str:
    """ "+X% capacity over the engine defaults", or why there is no such figure."""
    if outcome.recommended is None:
        return "no measured variant met the SLA: nothing to compare with the engine defaults"
    if outcome.gain is None:
        why = outcome.baseline.reason or "no load probed met the SLA"
        return f"the engine defaults did not meet the SLA ({why})"
    if outcome.noise is not None:
        return f"no better than defaults within noise: {outcome.noise}"
    if outcome.recommended is outcome.baseline:
        return "+0% capacity over the engine defaults: the defaults measured best"
    return f"{outcome.gain:+.0%} capacity over the engine defaults"


def _refusal(spec: RunSpec, run_dir: Path, resume: bool) -> str | None:
    if spec.backend not in MEASURING_BACKENDS:
        allowed = " or ".join(MEASURING_BACKENDS)
        return (
            f"--confirm measures on a real backend: use --backend {allowed} (got --backend "
            f"{spec.backend})"
        )
    if not spec.is_capacity:
        return "--screen compares capacities: drop --rate/--concurrency"
    if not resume and run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        return f"{run_dir}: not an empty folder; a --screen run needs a new run folder"
    return None


def check_screened_run(
    spec: RunSpec, run_dir: Path, *, resume: bool = False, fresh: bool = False
) -> None:
    """Refuse a run that cannot be screened and measured, before any work: one line each; a
    folder the caller created for it (`fresh`) is removed on a refusal."""
    why = _refusal(spec, run_dir, resume)
    if why is None:
        return
    if fresh:
        shutil.rmtree(run_dir, ignore_errors=True)
    raise InputError(why)


def _summary_lines(outcome: ScreenedOutcome) -> list[str]:
    """The report's summary: the gain, the baseline, what was passed over, refitted, skipped."""
    lines = [
        gain_text(outcome),
        f"baseline: {outcome.baseline_source}: {describe(outcome.baseline.config)}",
    ]
    lines += [outcome.profile_note] if outcome.profile_note else []
    lines += outcome.rounds
    lines += [f"not measurable here: {p}" for p in outcome.passed_over]
    if (r := outcome.refit) is not None:
        lines.append(
            f"refit from {r.observations} measurements, median |predicted/measured - 1|: "
            f"{r.moved()}; refitted profile: {r.path.name}"
        )
    skipped = [v for v in outcome.variants if v.status == "skipped"]
    return lines + [f"skipped: {v.label}: {v.reason}" for v in skipped]


def _write(outcome: ScreenedOutcome) -> None:
    spec, run_dir = outcome.spec, outcome.run_dir
    rows = confirm_rows(outcome.variants, spec, outcome.recommended)
    files = {name: run_dir / name for name in ("confirm.csv", "confirm.yaml", "report.html")}
    write_confirm_csv(rows, files["confirm.csv"])
    write_confirm_yaml(
        files["confirm.yaml"],
        spec,
        outcome.options,
        outcome.baseline_source,
        outcome.variants,
        outcome.passed_over,
        outcome.gain,
    )
    files.update(
        write_best_measured(spec, outcome.recommended, outcome.baseline, outcome.gain, run_dir)
    )
    title = (
        f"tuner: {spec.model.name} on {spec.gpu.name}, screened by sim, measured by {spec.backend}"
    )
    figures = parity_figures(outcome.variants, spec.sla.percentile)
    ok = outcome.recommended is not None
    page = render_confirm_html(title, _summary_lines(outcome), rows, figures, ok=ok)
    files["report.html"].write_text(page)
    outcome.files = {**files, "screen": run_dir / SCREEN_DIR}


def screened_tune(
    spec: RunSpec,
    run_dir: Path,
    options: ScreenOptions,
    *,
    fresh: bool = False,
    resume: bool = False,
    jobs: int = 1,
    callbacks: Callbacks | None = None,
    backend: Backend | None = None,
    on_screened: OnScreened = lambda s, v, p: None,
    on_variant: OnVariant = lambda v: None,
    on_progress: Callable[[str], None] = lambda line: None,
) -> ScreenedOutcome:
    """Screen `spec`'s space with the simulator into RUN/screen, measure the engine defaults and
    the top `options.confirm` predicted variants, write the run folder from the measurements.
    With `resume`, finish an interrupted run of `run_dir`: the screen's finished trials and the
    journal's measurements are kept, only what is missing runs."""
    started = time.perf_counter()
    check_screened_run(spec, run_dir, resume=resume)
    make_run_dir(run_dir)
    with run_folder_lock(run_dir):
        try:
            real = backend or run_backend(spec, run_dir)
            # The engine's own step times first (a stored calibration, else a quick one): the
            # spec written below screens and resumes with that profile.
            spec, profile_note = _screen_profile(spec, options, real, on_progress)
            write_screened_run(run_dir, spec, options)  # on a resume: the budgets given now
            screened = _screen(spec, run_dir, resume, callbacks, jobs)
        except InterruptedRunError:
            if (run_dir / SCREEN_DIR).is_dir():  # finished screen trials are kept
                kept = _continue(run_dir, "the screen's finished trials")
                raise InterruptedRunError(kept) from None
            if fresh:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        except BaseException:
            if fresh:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        outcome = _measure(
            spec,
            run_dir,
            options,
            real,
            screened,
            on_screened,
            on_variant,
            profile_note,
            on_progress,
        )
    outcome.wall_s = time.perf_counter() - started
    return outcome


def _screen_profile(
    spec: RunSpec, options: ScreenOptions, real: Backend, progress: Callable[[str], None]
) -> tuple[RunSpec, str | None]:
    """The spec with the screen's device profile (`tuner.screen.autocal`), and which it is."""
    if options.no_calibrate:
        return spec, None
    return screen_profile(spec, real, progress=progress)


def _continue(run_dir: Path, kept: str) -> str:
    return (
        f"interrupted; {kept} are kept in {run_dir}; continue with `tuner tune --resume {run_dir}`"
    )


def _screen(
    spec: RunSpec, run_dir: Path, resume: bool, callbacks: Callbacks | None, jobs: int
) -> TuneOutcome:
    """The sim screen into RUN/screen: new, or continued from its study on a resume."""
    screen = run_dir / SCREEN_DIR
    again = resume and (screen / RUN_FILE).is_file()
    if resume and not again:
        shutil.rmtree(screen, ignore_errors=True)  # killed before the screen wrote run.yaml
    return tune(
        screen_spec(spec), screen, resume=again, fresh=not again, callbacks=callbacks, jobs=jobs
    )


def _variants(
    spec: RunSpec, k: int, real: Backend, screened: TuneOutcome, done: dict[str, ConfirmedVariant]
) -> tuple[list[ConfirmedVariant], list[str], str, list[str]]:
    """The first round's variants (the defaults first, the journal's restored), the front
    variants passed over, where the defaults come from, and a line on predicted twins skipped."""
    base_config, source = engine_defaults(real, spec.gpu)
    baseline = ConfirmedVariant(
        role="baseline", predicted_rank=None, screen_trial=None, config=base_config
    )
    twins = predicted_twins([baseline], spec)
    candidates, passed = pick_candidates(screened.records, spec, real, k, base_config, twins=twins)
    first = [f"round 1: {twins_note(twins).removeprefix('; ')}"] if twins.skipped else []
    return restored([baseline, *candidates], done), passed, source, first


def _with_rest(
    variants: list[ConfirmedVariant], done: dict[str, ConfirmedVariant], screened: TuneOutcome
) -> list[ConfirmedVariant]:
    """`variants` and then the journal's measurements no round picked this time (a longer
    screen moved them): measured evidence is never dropped."""
    ranked = ranked_by_capacity(screened.records, screened.spec.sla)
    ranks = {r.number: rank for rank, r in enumerate(ranked, start=1)}
    picked = {config_key(v.config) for v in variants}
    rest = {key: v for key, v in done.items() if key not in picked}
    return [*variants, *restore_measured([], rest, ranks)]


def _measure(
    spec: RunSpec,
    run_dir: Path,
    options: ScreenOptions,
    real: Backend,
    screened: TuneOutcome,
    on_screened: OnScreened,
    on_variant: OnVariant,
    profile_note: str | None = None,
    on_progress: Callable[[str], None] = lambda line: None,
) -> ScreenedOutcome:
    """Measure the defaults and the screen's picks, then the later rounds' (journaling each),
    then write the folder."""
    done = read_measured(run_dir)
    variants, passed, source, first = _variants(spec, options.confirm, real, screened, done)
    on_screened(screened, variants, passed)
    for line in first:
        on_progress(line)
    started, seconds = time.perf_counter(), options.confirm_seconds

    def journaled(v: ConfirmedVariant) -> None:
        if not v.restored and v.status != "skipped":
            append_measured(run_dir, v)
        on_variant(v)

    def measure(batch: list[ConfirmedVariant]) -> None:
        spent = time.perf_counter() - started
        measure_variants(batch, spec, real, seconds, journaled, spent=spent)

    rounds = Rounds(
        spec, options, real, screened.records, done, measure,
        spent=lambda: seconds is not None and time.perf_counter() - started >= seconds,
        say=on_progress,
    )  # fmt: skip
    try:
        measure(variants)
        notes = more_rounds(variants, rounds)
    except KeyboardInterrupt:
        measured = len(read_measured(run_dir))
        raise InterruptedRunError(
            _continue(run_dir, f"the screen and {measured} measured variant(s) ({JOURNAL_FILE})")
        ) from None
    variants = _with_rest(variants, done, screened)
    outcome = _outcome(spec, options, run_dir, screened, source, variants, passed)
    outcome.profile_note, outcome.rounds = profile_note, first + notes
    if options.refit:
        try:
            outcome.refit = refit_device(variants, spec, run_dir)
        except ValueError as exc:  # nothing measured, or nothing the fit could use
            outcome.refit_note = f"no device profile written: {exc}"
    _write(outcome)
    return outcome


def _outcome(
    spec: RunSpec,
    options: ScreenOptions,
    run_dir: Path,
    screened: TuneOutcome,
    source: str,
    variants: list[ConfirmedVariant],
    passed: list[str],
) -> ScreenedOutcome:
    """The outcome of the measured variants: the measured best, kept only when it beats the
    defaults beyond both measured spreads (otherwise the defaults stay)."""
    recommended = recommend_measured(variants)
    noise = within_noise(recommended, variants[0])
    if noise is not None:
        recommended = variants[0]
    gain = gain_over_defaults(recommended, variants[0])
    outcome = ScreenedOutcome(
        spec, options, run_dir, screened, source, variants, passed, recommended, gain
    )
    outcome.noise = noise
    return outcome
