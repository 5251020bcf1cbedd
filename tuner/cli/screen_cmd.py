"""`tuner tune --screen sim --confirm K`: the flags of a screened tune and its printout.

`screen_options` adds the flags to `tune` and hands the command one checked `ScreenOptions`
(or None when no flag was given), so `tune` itself only branches on it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from optuna.trial import FrozenTrial
from rich.markup import escape
from rich.table import Table

from tuner.cli.output import print_table, say
from tuner.errors import BACKEND_FAILED, BackendError, NoFeasibleConfigError
from tuner.knobs.registry import short_config
from tuner.run.tune import TuneOutcome
from tuner.run_spec import RunSpec
from tuner.screen.baseline import describe
from tuner.screen.options import FLAGS, ScreenOptions, checked_flags, screen_spec
from tuner.screen.run import ScreenedOutcome, check_screened_run, gain_text, screened_tune
from tuner.screen.variant import ConfirmedVariant

__all__ = ["SCREEN_PARAM", "run_screened", "screen_options"]

F = TypeVar("F", bound=Callable[..., Any])
SCREEN_PARAM = "screen_flags"  # the keyword the decorated command receives
_HELP = {
    "screen": "Screen the space with this predictor, then measure the best on --backend: sim",
    "confirm": "With --screen: variants of the predicted front to measure per round (default "
    "3), plus the engine defaults in the first",
    "rounds": "With --screen: most rounds of measurement (default 3); after each, the simulator "
    "is refitted to the measurements and the screen re-ranked; stops early when a round did not "
    "improve the measured best",
    "confirm_seconds": "With --screen: measurement time budget, all rounds together; variants "
    "not started by then are skipped",
    "refit": "With --screen: refit the device profile from the measurements (RUN/device.yaml)",
    "no_calibrate": "With --screen on vLLM: screen with the --gpu profile as given, instead of "
    "a stored vLLM calibration of this host (else a quick one, run first)",
}
_TYPES: dict[str, Any] = {
    "screen": str | None,
    "confirm": int | None,
    "rounds": int | None,
    "confirm_seconds": float | None,
    "refit": bool,
    "no_calibrate": bool,
}


def screen_options(func: F) -> F:
    """Add --screen, --confirm, --rounds, --confirm-seconds and --refit; the command receives
    `screen_flags=ScreenOptions | None`, checked against its other flags."""
    sig = inspect.signature(func, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != SCREEN_PARAM]
    added = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=False if name in ("refit", "no_calibrate") else None,
            annotation=Annotated[_TYPES[name], typer.Option(help=_HELP[name])],
        )
        for name in FLAGS
    ]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        flags = {name: kwargs.pop(name) for name in FLAGS}
        return func(**kwargs, **{SCREEN_PARAM: checked_flags(flags, kwargs)})

    command.__signature__ = sig.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in [*own, *added]}
    return command  # type: ignore[return-value]


def _label(v: ConfirmedVariant) -> str:
    if v.role == "baseline":
        return v.label
    return f"{v.label} (screen trial {v.screen_trial})"


def _announce(screen: TuneOutcome, variants: list[ConfirmedVariant], passed: list[str]) -> None:
    done = sum(r.state in ("complete", "pruned") for r in screen.records)
    say(f"screen: {done} sim trials in {screen.wall_s:.1f} s ({screen.run_dir})")
    for line in passed:
        say(f"  not measurable here, passed over: {line}")
    if len(variants) == 1:
        say("  the screen predicted no variant meeting the SLA: measuring the engine defaults")
    say(f"measuring {len(variants)} variants:")
    for v in variants:
        say(f"  {_label(v)}: {short_config(v.config)}")


def _reported(v: ConfirmedVariant) -> None:
    if v.restored:
        say(f"kept {_label(v)}: {v.status} by the earlier run of this folder")
        return
    if v.status == "skipped":
        say(f"skipped {_label(v)}: {v.reason}")
        return
    if v.status == "infeasible" or v.measured is None or v.predicted is None:
        say(f"measured {_label(v)}: could not run: {v.reason}")
        return
    m, p = v.measured, v.predicted
    probes = v.capacity.probes if v.capacity else 0
    say(
        f"measured {_label(v)}: {m.capacity_tok_s_per_gpu:,.1f} tok/s per GPU at the SLA "
        f"({m.capacity_rps_per_gpu:,.3g} req/s); predicted {p.capacity_tok_s_per_gpu:,.1f}; "
        f"{probes} probes, {v.wall_s:.0f} s"
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}"


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "-" if x is None else format(x, fmt)


def _pair(v: ConfirmedVariant, field: str, fmt: str) -> str:
    """'predicted/measured' of a latency Side field."""
    p, m = v.predicted, v.measured
    predicted = _num(getattr(p, field) if p else None, fmt)
    return f"{predicted}/{_num(getattr(m, field) if m else None, fmt)}"


def _table(outcome: ScreenedOutcome) -> Table:
    pct = outcome.spec.sla.percentile
    t = Table(title="measured variants: predicted vs measured (capacity = tok/s per GPU at SLA)")
    columns = ("variant", "knobs", "status", "pred cap", "meas cap", "err")
    for col in (*columns, f"TTFT P{pct} p/m", f"TPOT P{pct} p/m"):
        t.add_column(col, justify="left" if col in ("variant", "knobs") else "right")
    for v in outcome.variants:
        p, m = v.predicted, v.measured
        mark = " *" if v is outcome.recommended else ""
        # A variant whose server died mid-search has no capacity, only the loads it held before.
        ran = v.status == "measured"
        t.add_row(
            escape(_label(v) + mark),
            escape(short_config(v.config)),
            v.status,
            _num(p.capacity_tok_s_per_gpu if p else None),
            _num(m.capacity_tok_s_per_gpu if m and ran else None),
            _pct(v.rel_error("capacity_tok_s_per_gpu") if ran else None),
            _pair(v, "ttft_ms", ",.0f"),
            _pair(v, "tpot_ms", ",.1f"),
        )
    return t


def _print(outcome: ScreenedOutcome) -> None:
    print_table(_table(outcome))
    say("err: predicted / measured - 1; p/m: predicted / measured at the measured capacity load")
    say(f"baseline: {outcome.baseline_source}: {describe(outcome.baseline.config)}")
    if outcome.profile_note:
        say(outcome.profile_note)
    for line in outcome.rounds:
        say(line)
    for name in ("confirm.csv", "report.html", "best.yaml", "screen"):
        say(f"  {name}: {outcome.files[name]}")
    _print_refit(outcome)
    rec = outcome.recommended
    ran = [v.metrics for v in outcome.variants if v.metrics is not None]
    if rec is None and ran and all(m.extra.get(BACKEND_FAILED) for m in ran):
        # No server could start for any variant: the backend's failure (4), not the SLA's (3).
        raise BackendError(f"the {outcome.spec.backend} backend could not run: {ran[0].reason}")
    if rec is None:
        raise NoFeasibleConfigError(
            "no measured variant met the SLA (confirm.csv says how each did); the simulator's "
            f"unmeasured pick is in {outcome.files['screen'] / 'best.yaml'}"
        )
    say(f"recommended (measured): {_label(rec)}: {short_config(rec.config)}", style="bold")
    say(gain_text(outcome), style="bold")
    if "exports" in outcome.files:
        say(f"  exports: {outcome.files['exports']}")


def _print_refit(outcome: ScreenedOutcome) -> None:
    if outcome.refit_note:
        say(f"refit: {outcome.refit_note}")
    if (r := outcome.refit) is None:
        return
    say(
        f"refit from {r.observations} measured variants, median |predicted/measured - 1|: "
        f"{r.moved()}"
    )
    say(f"  refitted device profile: {r.path} (use it as --gpu {r.path})")


def run_screened(
    spec: RunSpec,
    folder: Path,
    fresh: bool,
    options: ScreenOptions,
    jobs: int,
    progress: Callable[[RunSpec], AbstractContextManager[Callable[[Any, FrozenTrial], None]]],
    *,
    resume: bool = False,
) -> None:
    """Run (or resume) the screened tune with tune's progress display for the screen, and print
    it."""
    check_screened_run(spec, folder, resume=resume, fresh=fresh)  # one line, before the progress
    with progress(screen_spec(spec)) as callback:
        outcome = screened_tune(
            spec,
            folder,
            options,
            fresh=fresh,
            resume=resume,
            jobs=jobs,
            callbacks=[callback],
            on_screened=_announce,
            on_variant=_reported,
            on_progress=say,
        )
    say(
        f"{len(outcome.variants)} variants measured by {spec.backend} in {outcome.wall_s:.0f} s "
        "(screen included)"
    )
    _print(outcome)
