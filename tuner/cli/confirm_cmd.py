"""`tuner tune --screen sim --confirm K`: the flags of a multi-fidelity tune and its printout.

`screen_options` adds the flags to `tune` and hands the command one checked `ConfirmOptions`
(or None when no flag was given), so `tune` itself only branches on it.
"""

from __future__ import annotations

import functools
import inspect
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from optuna.trial import FrozenTrial
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from tuner.cli.output import print_table, say
from tuner.cli.tune_summary import short_config
from tuner.detect import MEASURING_BACKENDS
from tuner.errors import InputError, NoFeasibleConfigError, echo
from tuner.run.confirm import SCREENS, ConfirmedVariant, ConfirmOptions, screen_spec
from tuner.run.confirm_baseline import describe
from tuner.run.confirm_journal import load_screened_run
from tuner.run.confirm_run import ConfirmOutcome, check_confirm_run, confirmed_tune, gain_text
from tuner.run.spec import RunSpec, load_run_spec
from tuner.run.tune import TuneOutcome

__all__ = ["SCREEN_PARAM", "load_resumed", "resumed_options", "run_confirm", "screen_options"]

F = TypeVar("F", bound=Callable[..., Any])
SCREEN_PARAM = "screen_flags"  # the keyword the decorated command receives
_FLAGS = {
    "screen": Annotated[str | None, typer.Option(
        help="Screen the space with this predictor, then measure the best on --backend: sim")],
    "confirm": Annotated[int | None, typer.Option(
        help="With --screen: variants of the predicted front to measure (default 3), plus the "
        "engine defaults")],
    "confirm_seconds": Annotated[float | None, typer.Option(
        help="With --screen: measurement time budget; variants not started by then are skipped")],
    "refit": Annotated[bool, typer.Option(
        help="With --screen: refit the device profile from the measurements (RUN/device.yaml)")],
}  # fmt: skip


def _checked(flags: dict[str, Any], kwargs: dict[str, Any]) -> ConfirmOptions | None:
    """The screen flags as ConfirmOptions (None when none is given); InputError on a bad mix."""
    screen = flags["screen"]
    if screen is None:
        # `is not False`, not `in (None, False)`: `--confirm 0` equals False and is still given.
        set_now = {k: v for k, v in flags.items() if v is not None and v is not False}
        if set_now and kwargs.get("resume") is not None:
            # Checked against the run folder by `resumed_options`: only a screened run takes them.
            return _options(set_now)
        if set_now:
            given = [f"--{k.replace('_', '-')}" for k in set_now]
            raise InputError(f"{', '.join(given)} needs --screen sim (a screened tune)")
        return None
    if screen not in SCREENS:
        raise InputError(f"--screen {echo(screen)}: not a predictor; allowed: "
                         f"{', '.join(SCREENS)}")  # fmt: skip
    if kwargs.get("backend") not in MEASURING_BACKENDS:
        raise InputError(f"--screen {screen} --confirm measures on a real backend: use --backend "
                         f"{' or '.join(MEASURING_BACKENDS)} (got --backend "
                         f"{echo(str(kwargs.get('backend')))})")  # fmt: skip
    if kwargs.get("resume") is not None:
        raise InputError(
            "--screen cannot be combined with --resume: a screened run folder "
            "remembers its flags, resume it with `tuner tune --resume RUN` alone"
        )
    for name in ("config", "storage"):
        if kwargs.get(name) is not None:
            raise InputError(f"--screen cannot be combined with --{name} (a screened tune is "
                             "one new run folder)")  # fmt: skip
    return _options({"screen": screen, "confirm": 3 if flags["confirm"] is None
                     else flags["confirm"], "confirm_seconds": flags["confirm_seconds"],
                     "refit": flags["refit"]})  # fmt: skip


def _options(fields: dict[str, Any]) -> ConfirmOptions:
    """ConfirmOptions of the given fields only (its `model_fields_set` says which were given)."""
    try:
        return ConfirmOptions(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-")
        raise InputError(f"{flag} {err['input']}: {err['msg']}") from None


def load_resumed(
    run_dir: Path, given: ConfirmOptions | None
) -> tuple[RunSpec, ConfirmOptions | None]:
    """The spec of the run folder to resume, and its screen options if it is a screened run."""
    screened = load_screened_run(run_dir)
    if screened is not None:
        return screened.spec, resumed_options(screened.options, given)
    if given is not None:
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(given.model_fields_set))
        raise InputError(f"{flags}: {run_dir} is not a screened run (--screen sim); "
                         "these flags only change a screened run on --resume")  # fmt: skip
    return load_run_spec(run_dir), None


def resumed_options(saved: ConfirmOptions, given: ConfirmOptions | None) -> ConfirmOptions:
    """A resumed screened run's options: the saved ones with the flags given now on top."""
    if given is None:
        return saved
    return saved.model_copy(update={k: getattr(given, k) for k in given.model_fields_set})


def screen_options(func: F) -> F:
    """Add --screen, --confirm, --confirm-seconds and --refit; the command receives
    `screen_flags=ConfirmOptions | None`, checked against its other flags."""
    sig = inspect.signature(func, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != SCREEN_PARAM]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                               default=False if name == "refit" else None, annotation=kind)
             for name, kind in _FLAGS.items()]  # fmt: skip

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        flags = {name: kwargs.pop(name) for name in _FLAGS}
        return func(**kwargs, **{SCREEN_PARAM: _checked(flags, kwargs)})

    command.__signature__ = sig.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in [*own, *added]}
    return command  # type: ignore[return-value]


def _label(v: ConfirmedVariant) -> str:
    if v.role == "baseline":
        return "engine defaults"
    return f"rank {v.predicted_rank} (screen trial {v.screen_trial})"


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
    say(f"measured {_label(v)}: {m.capacity_tok_s_per_gpu:,.1f} tok/s per GPU at the SLA "
        f"({m.capacity_rps_per_gpu:,.3g} req/s); predicted {p.capacity_tok_s_per_gpu:,.1f}; "
        f"{v.capacity.probes if v.capacity else 0} probes, {v.wall_s:.0f} s")  # fmt: skip


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}"


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "-" if x is None else format(x, fmt)


def _table(outcome: ConfirmOutcome) -> Table:
    pct = outcome.spec.sla.percentile
    t = Table(title="confirmed variants: predicted vs measured (capacity = tok/s per GPU at SLA)")
    for col in ("variant", "knobs", "status", "pred cap", "meas cap", "err", f"TTFT P{pct} p/m",
                f"TPOT P{pct} p/m"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("variant", "knobs") else "right")
    for v in outcome.variants:
        p, m = v.predicted, v.measured
        mark = " *" if v is outcome.recommended else ""
        t.add_row(
            escape(_label(v) + mark), escape(short_config(v.config)), v.status,
            _num(p.capacity_tok_s_per_gpu if p else None),
            _num(m.capacity_tok_s_per_gpu if m else None),
            _pct(v.rel_error("capacity_tok_s_per_gpu")),
            f"{_num(p.ttft_ms if p else None, ',.0f')}/{_num(m.ttft_ms if m else None, ',.0f')}",
            f"{_num(p.tpot_ms if p else None, ',.1f')}/{_num(m.tpot_ms if m else None, ',.1f')}",
        )  # fmt: skip
    return t


def _print(outcome: ConfirmOutcome) -> None:
    print_table(_table(outcome))
    say("err: predicted / measured - 1; p/m: predicted / measured at the measured capacity load")
    say(f"baseline: {outcome.baseline_source}: {describe(outcome.baseline.config)}")
    for name in ("confirm.csv", "report.html", "best.yaml", "screen"):
        say(f"  {name}: {outcome.files[name]}")
    _print_refit(outcome)
    rec = outcome.recommended
    if rec is None:
        raise NoFeasibleConfigError(
            "no measured variant met the SLA (confirm.csv says how each did); the simulator's "
            f"unmeasured pick is in {outcome.files['screen'] / 'best.yaml'}"
        )
    say(f"recommended (measured): {_label(rec)}: {short_config(rec.config)}", style="bold")
    say(gain_text(outcome), style="bold")
    if "exports" in outcome.files:
        say(f"  exports: {outcome.files['exports']}")


def _print_refit(outcome: ConfirmOutcome) -> None:
    if outcome.refit_note:
        say(f"refit: {outcome.refit_note}")
    if outcome.refit is None:
        return
    r = outcome.refit
    say(f"refit from {r.observations} measured variants, median |predicted/measured - 1|: "
        f"{r.moved()}")  # fmt: skip
    say(f"  refitted device profile: {r.path} (use it as --gpu {r.path})")


def run_confirm(
    spec: RunSpec,
    folder: Path,
    fresh: bool,
    options: ConfirmOptions,
    jobs: int,
    progress: Callable[[RunSpec], AbstractContextManager[Callable[[Any, FrozenTrial], None]]],
    *,
    resume: bool = False,
) -> None:
    """Run (or resume) the screened tune with tune's progress display for the screen, and print
    it."""
    try:
        check_confirm_run(spec, folder, resume=resume)  # before the progress line: one line
    except InputError:
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    screening = screen_spec(spec)
    with progress(screening) as callback:
        outcome = confirmed_tune(spec, folder, options, fresh=fresh, resume=resume, jobs=jobs,
                                 callbacks=[callback], on_screened=_announce,
                                 on_variant=_reported)  # fmt: skip
    say(f"{len(outcome.variants)} variants measured by {spec.backend} in {outcome.wall_s:.0f} s "
        "(screen included)")  # fmt: skip
    _print(outcome)
