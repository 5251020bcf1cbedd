"""`tuner tune --screen sim --confirm K` as a library call: screen with the simulator, measure the
top-K plus the engine defaults on the real backend, recommend from the measurements only."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tuner.backends import Backend, get_backend
from tuner.detect import MEASURING_BACKENDS
from tuner.errors import InputError, InterruptedRunError
from tuner.run.confirm import (
    ConfirmedVariant,
    ConfirmOptions,
    gain_over_defaults,
    measure_variants,
    pick_candidates,
    recommend_measured,
    screen_spec,
)
from tuner.run.confirm_baseline import describe, engine_defaults
from tuner.run.confirm_journal import (
    JOURNAL_FILE,
    SCREEN_DIR,
    append_measured,
    read_measured,
    restore_measured,
    screen_of,
    write_screened_run,
)
from tuner.run.confirm_out import (
    confirm_rows,
    write_best_measured,
    write_confirm_csv,
    write_confirm_yaml,
)
from tuner.run.confirm_refit import RefitReport, refit_device
from tuner.run.folder import make_run_dir
from tuner.run.lock import run_folder_lock
from tuner.run.report_confirm import parity_figures, render_confirm_html
from tuner.run.spec import RUN_FILE, RunSpec
from tuner.run.tune import TuneOutcome, tune
from tuner.search.frontier import ranked_by_capacity

__all__ = ["ConfirmOutcome", "check_confirm_run", "confirmed_tune", "gain_text", "screen_of"]


@dataclass
class ConfirmOutcome:
    """What a multi-fidelity tune produced."""

    spec: RunSpec
    options: ConfirmOptions
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

    @property
    def baseline(self) -> ConfirmedVariant:
        """The engine-defaults variant (always the first measured)."""
        return self.variants[0]


def gain_text(outcome: ConfirmOutcome) -> str:
    """ "+X% capacity over the engine defaults", or why there is no such figure."""
    if outcome.recommended is None:
        return "no measured variant met the SLA: nothing to compare with the engine defaults"
    if outcome.gain is None:
        why = outcome.baseline.reason or "no load probed met the SLA"
        return f"the engine defaults did not meet the SLA ({why})"
    if outcome.recommended is outcome.baseline:
        return "+0% capacity over the engine defaults: the defaults measured best"
    return f"{outcome.gain:+.0%} capacity over the engine defaults"


def check_confirm_run(spec: RunSpec, run_dir: Path, *, resume: bool = False) -> None:
    """Refuse a run that cannot be confirmed, before any work: one line each."""
    if spec.backend not in MEASURING_BACKENDS:
        allowed = " or ".join(MEASURING_BACKENDS)
        raise InputError(f"--confirm measures on a real backend: use --backend {allowed} "
                         f"(got --backend {spec.backend})")  # fmt: skip
    if not spec.is_capacity:
        raise InputError("--screen compares capacities: drop --rate/--concurrency")
    if resume:
        return
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise InputError(f"{run_dir}: not an empty folder; a --screen run needs a new run folder")


def _backend(spec: RunSpec, run_dir: Path) -> Backend:
    options = dict(spec.backend_options)
    if spec.backend == "vllm":
        options.setdefault("run_dir", str(run_dir / "vllm-logs"))
    return get_backend(spec.backend, **options)


def _write(outcome: ConfirmOutcome) -> None:
    spec, run_dir = outcome.spec, outcome.run_dir
    rows = confirm_rows(outcome.variants, spec, outcome.recommended)
    files = {"confirm.csv": run_dir / "confirm.csv", "confirm.yaml": run_dir / "confirm.yaml",
             "report.html": run_dir / "report.html"}  # fmt: skip
    write_confirm_csv(rows, files["confirm.csv"])
    write_confirm_yaml(files["confirm.yaml"], spec, outcome.options, outcome.baseline_source,
                       outcome.variants, outcome.passed_over, outcome.gain)  # fmt: skip
    files.update(write_best_measured(spec, outcome.recommended, outcome.baseline, outcome.gain,
                                     run_dir))  # fmt: skip
    lines = [
        gain_text(outcome),
        f"baseline: {outcome.baseline_source}: {describe(outcome.baseline.config)}",
    ]
    lines += [f"not measurable here: {p}" for p in outcome.passed_over]
    if outcome.refit is not None:
        r = outcome.refit
        lines.append(f"refit from {r.observations} measurements, median |predicted/measured - 1|: "
                     f"{r.moved()}; refitted profile: {r.path.name}")  # fmt: skip
    lines += [f"skipped: {_label(v)}: {v.reason}" for v in outcome.variants
              if v.status == "skipped"]  # fmt: skip
    title = (
        f"tuner: {spec.model.name} on {spec.gpu.name}, screened by sim, measured by {spec.backend}"
    )
    page = render_confirm_html(title, lines, rows,
                               parity_figures(outcome.variants, spec.sla.percentile),
                               ok=outcome.recommended is not None)  # fmt: skip
    files["report.html"].write_text(page)
    outcome.files = {**files, "screen": run_dir / SCREEN_DIR}


def _label(v: ConfirmedVariant) -> str:
    return "engine defaults" if v.role == "baseline" else f"rank {v.predicted_rank}"


def confirmed_tune(
    spec: RunSpec,
    run_dir: Path,
    options: ConfirmOptions,
    *,
    fresh: bool = False,
    resume: bool = False,
    jobs: int = 1,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None = None,
    backend: Backend | None = None,
    on_screened: Callable[[TuneOutcome, list[ConfirmedVariant], list[str]], None] = (
        lambda s, v, p: None
    ),
    on_variant: Callable[[ConfirmedVariant], None] = lambda v: None,
) -> ConfirmOutcome:
    """Screen `spec`'s space with the simulator into RUN/screen, measure the engine defaults and
    the top `options.confirm` predicted variants, write the run folder from the measurements.
    With `resume`, finish an interrupted run of `run_dir`: the screen's finished trials and the
    journal's measurements are kept, only what is missing runs."""
    started = time.perf_counter()
    check_confirm_run(spec, run_dir, resume=resume)
    make_run_dir(run_dir)
    with run_folder_lock(run_dir):
        write_screened_run(run_dir, spec, options)  # on a resume: the budgets given now
        try:
            real = backend or _backend(spec, run_dir)
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
        outcome = _confirm(spec, run_dir, options, real, screened, on_screened, on_variant)
    outcome.wall_s = time.perf_counter() - started
    return outcome


def _continue(run_dir: Path, kept: str) -> str:
    return (f"interrupted; {kept} are kept in {run_dir}; continue with "
            f"`tuner tune --resume {run_dir}`")  # fmt: skip


def _screen(
    spec: RunSpec,
    run_dir: Path,
    resume: bool,
    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] | None,
    jobs: int,
) -> TuneOutcome:
    """The sim screen into RUN/screen: new, or continued from its study on a resume."""
    screen = run_dir / SCREEN_DIR
    again = resume and (screen / RUN_FILE).is_file()
    if resume and not again:
        shutil.rmtree(screen, ignore_errors=True)  # killed before the screen wrote run.yaml
    return tune(screen_spec(spec), screen, resume=again, fresh=not again, callbacks=callbacks,
                jobs=jobs)  # fmt: skip


def _confirm(
    spec: RunSpec,
    run_dir: Path,
    options: ConfirmOptions,
    real: Backend,
    screened: TuneOutcome,
    on_screened: Callable[[TuneOutcome, list[ConfirmedVariant], list[str]], None],
    on_variant: Callable[[ConfirmedVariant], None],
) -> ConfirmOutcome:
    """Measure the defaults and the screen's picks (journaling each), then write the folder."""
    base_config, source = engine_defaults(real, spec.gpu)
    baseline = ConfirmedVariant(role="baseline", predicted_rank=None, screen_trial=None,
                                config=base_config)  # fmt: skip
    candidates, passed = pick_candidates(screened.records, spec, real, options.confirm,
                                         base_config)  # fmt: skip
    ranked = ranked_by_capacity(screened.records, spec.sla)
    ranks = {r.number: rank for rank, r in enumerate(ranked, start=1)}
    variants = restore_measured([baseline, *candidates], read_measured(run_dir), ranks)
    on_screened(screened, variants, passed)

    def journaled(v: ConfirmedVariant) -> None:
        if not v.restored and v.status != "skipped":
            append_measured(run_dir, v)
        on_variant(v)

    try:
        measure_variants(variants, spec, real, options.confirm_seconds, journaled)
    except KeyboardInterrupt:
        done = len(read_measured(run_dir))
        raise InterruptedRunError(
            _continue(run_dir, f"the screen and {done} measured variant(s) ({JOURNAL_FILE})")
        ) from None
    recommended = recommend_measured(variants)
    outcome = ConfirmOutcome(spec, options, run_dir, screened, source, variants, passed,
                             recommended, gain_over_defaults(recommended, variants[0]))  # fmt: skip
    if options.refit:
        try:
            outcome.refit = refit_device(variants, spec, run_dir)
        except ValueError as exc:  # nothing measured, or nothing the fit could use
            outcome.refit_note = f"no device profile written: {exc}"
    _write(outcome)
    return outcome
