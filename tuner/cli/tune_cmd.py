"""`tuner tune`, `tuner report DIR`, `tuner export --trial N DIR`: thin CLI over tuner.run.tune."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import optuna
import typer
from optuna.trial import FrozenTrial
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tuner import knobs
from tuner.cli.app import app, console, guarded
from tuner.cli.confirm_cmd import load_resumed, run_confirm, screen_options
from tuner.cli.knob_flags import knob_options
from tuner.cli.options import (
    AcceptanceRate,
    BackendName,
    CapacityLoad,
    CapacityProbes,
    CapacityProbeSeconds,
    CompileStep,
    FixedLoadRate,
    FixedLoadUsers,
    GPUName,
    LengthsFile,
    MaybeInputTokens,
    MaybeModelName,
    MaybeOutputTokens,
    MaybePrefixCacheHit,
    ModelPath,
    NgramAcceptanceRate,
    NumRequests,
    OutDir,
    RunDir,
    SLAName,
    SpaceName,
    StudyName,
    TensorParallelGPUs,
    TimeBudget,
    TPOTBound,
    TrialBudget,
    TTFTBound,
)
from tuner.cli.output import print_note, print_table, say
from tuner.cli.tune_summary import print_capacity_summary, speculation_line
from tuner.detect import MEASURING_BACKENDS, local_device_count, local_gpu_profile
from tuner.errors import InputError
from tuner.run.confirm import ConfirmOptions
from tuner.run.confirm_journal import screen_of
from tuner.run.folder import claim_run_dir, write_exports
from tuner.run.spec import (
    DEFAULT_NUM_GPUS,
    DEFAULT_TRIALS,
    RunSpec,
    build_run_spec,
    load_run_spec,
    run_dir_name,
)
from tuner.run.tune import TuneOutcome, check_run_dir, rebuild, require_recommendation, tune
from tuner.run.worker import rebuild_from_storage
from tuner.search.parallel import count_states
from tuner.search.trials import ATTR_METRICS
from tuner.specs import DEFAULT_SAMPLER, GPUProfile

__all__ = ["export", "report", "tune_command"]

RepeatConfig = Annotated[Path | None, typer.Option(help="run.yaml of an earlier run to repeat")]


def _load_text(spec: RunSpec) -> str:
    wl = spec.workload
    if wl.rate_rps is not None:
        return f"Poisson rate {wl.rate_rps:g} req/s"
    return f"{wl.users} closed-loop users"


class _ProgressCallback:
    """Advances the Rich bar (or prints a line) and tracks the best feasible throughput."""

    def __init__(self, progress: Progress | None, task: Any, total: int) -> None:
        self.progress, self.task, self.total = progress, task, total
        self.best: float | None = None
        self.done = 0

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        constraints = trial.constraints
        metrics = trial.user_attrs.get(ATTR_METRICS)
        if metrics and constraints and all(v <= 0 for v in constraints.values()):
            extra = metrics.get("extra", {})
            tput = float(
                extra.get("capacity_tok_s_per_gpu") or metrics["output_tokens_per_s_per_gpu"]
            )
            self.best = tput if self.best is None else max(self.best, tput)
        best = "-" if self.best is None else f"{self.best:,.0f}"
        # Other workers finish trials too: count the study's, not this process's.
        self.done = count_states(study).finished
        if self.progress is None:
            say(f"trial {trial.number} {trial.state.name.lower()} ({self.done}/{self.total}); "
                f"best feasible {best} tok/s/GPU")  # fmt: skip
        else:
            self.progress.update(self.task, completed=self.done, best=best)


def _cell(value: object) -> str:
    """A knob value in the Pareto table (booleans as on/off, None as -)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else str(value)


def _pareto_table(outcome: TuneOutcome) -> Table:
    pct = outcome.spec.sla.percentile
    t = Table(title=f"Pareto set ({len(outcome.result.front)} of {len(outcome.records)} trials)")
    shown = knobs.searched()
    for col in ("trial", *(k.label for k in shown), f"TTFT P{pct} ms", f"TPOT P{pct} ms",
                "tok/s/GPU"):  # fmt: skip
        t.add_column(col, justify="right")
    by_number = {r.number: r for r in outcome.records}
    for n in outcome.result.front:
        r = by_number[n]
        c, m = r.config, r.metrics
        assert c is not None and m is not None
        values = c.model_dump(mode="json")
        style = "bold black on yellow" if n == outcome.result.recommended else None
        t.add_row(
            f"{n}{' *' if n == outcome.result.recommended else ''}",
            *(_cell(values[k.name]) for k in shown),
            f"{m.ttft_ms.at(pct):.1f}", f"{m.tpot_ms.at(pct):.2f}",
            f"{m.output_tokens_per_s_per_gpu:,.0f}", style=style,
        )  # fmt: skip
    return t


def _print_outcome(outcome: TuneOutcome) -> None:
    if outcome.result.mode == "capacity":
        print_capacity_summary(outcome)
        return
    say(f"mode: fixed load ({_load_text(outcome.spec)})")
    if outcome.result.front:
        print_table(_pareto_table(outcome))
    say(f"run folder: {outcome.run_dir}")
    for name, path in sorted(outcome.files.items()):
        say(f"  {name}: {path}")
    number = require_recommendation(outcome)  # exits 3 with the closest misses when none
    room = "" if outcome.result.headroom_met else " (meets the SLA without the headroom margin)"
    say(f"recommended: trial {number}{room} (* in the table)", style="bold")
    rec = next(r for r in outcome.records if r.number == number)
    if line := speculation_line(rec):
        say(f"  {line}")
    vllm_sh = outcome.run_dir / "exports" / "vllm.sh"
    if vllm_sh.exists():
        say("vLLM: " + vllm_sh.read_text().split("exec ", 1)[-1].strip())


@app.command("tune")
@guarded
@knob_options("choices")
@screen_options
def tune_command(
    ctx: typer.Context,
    model: MaybeModelName = None,
    gpu: GPUName = None,
    sla: SLAName = "chat",
    ttft_ms: TTFTBound = None,
    tpot_ms: TPOTBound = None,
    percentile: Annotated[int | None, typer.Option(help="SLA percentile: 50/90/95/99")] = None,
    space: SpaceName = "default",
    num_gpus: TensorParallelGPUs = None,
    workload: Annotated[Path | None, typer.Option(help="Workload YAML file")] = None,
    isl: MaybeInputTokens = None,
    osl: MaybeOutputTokens = None,
    concurrency: FixedLoadUsers = None,
    rate: FixedLoadRate = None,
    capacity_load: CapacityLoad = "rate",
    num_requests: NumRequests = None,
    probes: CapacityProbes = None,
    probe_seconds: CapacityProbeSeconds = None,
    lengths: LengthsFile = None,
    prefix_cache_hit: MaybePrefixCacheHit = None,
    acceptance: AcceptanceRate = None,
    ngram_acceptance: NgramAcceptanceRate = None,
    backend: BackendName = "sim",
    model_path: ModelPath = None,
    compile_step: CompileStep = False,
    model_source: Annotated[str | None, typer.Option(help="Model id in the exports")] = None,
    sampler: Annotated[str, typer.Option(help="tpe | nsga2 | random | grid")] = DEFAULT_SAMPLER,
    trials: TrialBudget = None,
    timeout: TimeBudget = None,
    seed: Annotated[int, typer.Option(help="Sampler seed")] = 0,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL (shared study)")] = None,
    study: StudyName = "tuner",
    out: OutDir = Path("reports"),
    run_dir: RunDir = None,
    config: RepeatConfig = None,
    resume: Annotated[Path | None, typer.Option(help="Run folder to resume")] = None,
    knob_flags: dict[str, str | None] | None = None,
    screen_flags: ConfirmOptions | None = None,
    jobs: Annotated[int, typer.Option(help="Local worker processes on this study")] = 1,
) -> None:
    """Search engine configs for the highest throughput per GPU that meets the SLA."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _check_overrides(ctx, resume=resume, config=config)
    if jobs < 1:
        raise InputError(f"--jobs {jobs}: must be at least 1")
    if resume is not None:
        spec, screen_flags = load_resumed(resume, screen_flags)
    elif config is not None:
        spec = load_run_spec(config)
    else:
        spec = build_run_spec(
            model=_required_model(model), gpu=gpu or _local_gpu(backend), sla=sla,
            ttft_ms=ttft_ms, tpot_ms=tpot_ms, percentile=percentile, space=space,
            num_gpus=num_gpus or _default_num_gpus(backend), workload_file=workload,
            workload_fields={"input_tokens": isl, "output_tokens": osl,
                             "concurrency": concurrency, "rate_rps": rate,
                             "num_requests": num_requests, "prefix_cache_hit": prefix_cache_hit,
                             "lengths_file": lengths, "acceptance_rate": acceptance,
                             "ngram_acceptance_rate": ngram_acceptance},
            backend=backend, model_path=model_path, model_source=model_source, sampler=sampler,
            trials=trials or DEFAULT_TRIALS, timeout_s=timeout, seed=seed, storage=storage,
            study_name=study, compile_step=compile_step, knob_flags=knob_flags,
            capacity_load=capacity_load, probes=probes, probe_seconds=probe_seconds,
        )  # fmt: skip
    folder, fresh = _target_folder(spec, resume=resume, run_dir=run_dir, out=out)
    overrides = {"trials": trials, "timeout_s": timeout}
    spec = spec.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    if screen_flags is not None:  # a screened tune: sim screen, measured confirmation
        return run_confirm(spec, folder, fresh, screen_flags, jobs, _progress,
                           resume=resume is not None)  # fmt: skip
    _tune_and_print(spec, folder, resume=resume is not None, fresh=fresh, jobs=jobs)


def _tune_and_print(spec: RunSpec, folder: Path, *, resume: bool, fresh: bool, jobs: int) -> None:
    """An unscreened tune with its progress display, then its summary."""
    with _progress(spec) as callback:
        outcome = tune(spec, folder, resume=resume, fresh=fresh, callbacks=[callback], jobs=jobs)
    for line in outcome.worker_errors:
        print_note(f"warning: {line}")
    finished = sum(r.state in ("complete", "pruned") for r in outcome.records)
    say(f"{finished} trials ({outcome.evaluations} evaluations by {spec.backend}) in "
        f"{outcome.wall_s:.1f} s")  # fmt: skip
    _print_outcome(outcome)


def _required_model(model: str | None) -> str:
    """--model, which a new run needs."""
    if model is None:
        raise InputError("--model is required (or --config run.yaml / --resume DIR)")
    return model


def _local_gpu(backend: str) -> str | GPUProfile:
    """The profile of this machine's GPU or CPU (torch/vllm measure here), with a note saying so."""
    gpu, note = local_gpu_profile(backend)
    print_note(note)
    return gpu


def _default_num_gpus(backend: str) -> int:
    """8 GPUs to plan for, or the devices here when a backend measures on this machine."""
    return local_device_count() if backend in MEASURING_BACKENDS else DEFAULT_NUM_GPUS


def _target_folder(
    spec: RunSpec, *, resume: Path | None, run_dir: Path | None, out: Path
) -> tuple[Path, bool]:
    """(run folder, whether this command created it); a --run-dir holding another run is
    refused here, before any progress line is printed."""
    if resume is not None:
        return resume, False
    if run_dir is not None:
        check_run_dir(spec, run_dir)
        return run_dir, False
    # A new, exclusively created folder: two tunes in the same second never share one.
    return claim_run_dir(out, run_dir_name(spec, datetime.now())), True


# Flags that may change a run loaded from run.yaml (--config) or a run folder (--resume); every
# other flag would be silently ignored, so it is refused.
_CONFIG_OVERRIDES = frozenset({"trials", "timeout", "out", "run_dir", "config", "jobs"})
_RESUME_OVERRIDES = frozenset({"trials", "timeout", "resume", "jobs", "confirm",
                               "confirm_seconds", "refit"})  # fmt: skip


def _check_overrides(ctx: typer.Context, *, resume: Path | None, config: Path | None) -> None:
    if resume is None and config is None:
        return
    allowed, flag = (_RESUME_OVERRIDES, "--resume") if resume else (_CONFIG_OVERRIDES, "--config")
    given = [
        name for name in ctx.params
        if (source := ctx.get_parameter_source(name)) is not None
        and source.name == "COMMANDLINE" and name not in allowed
    ]  # fmt: skip
    if given:
        flags = ", ".join("--" + g.replace("_", "-") for g in given)
        ok = ", ".join("--" + a.replace("_", "-") for a in sorted(allowed))
        raise InputError(f"{flags} cannot be combined with {flag} (the run's inputs come from "
                         f"its run.yaml); allowed with {flag}: {ok}")  # fmt: skip


@contextmanager
def _progress(spec: RunSpec) -> Iterator[Callable[[optuna.Study, FrozenTrial], None]]:
    """A Rich bar on a terminal, one plain line per trial otherwise (logs, pipes, CI)."""
    title = f"tuning {spec.model.name} on {spec.gpu.name}"
    if not console.is_terminal:
        say(title)
        yield _ProgressCallback(None, None, spec.trials)
        return
    columns = (
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        MofNCompleteColumn(), TextColumn("best feasible {task.fields[best]} tok/s/GPU"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
    )  # fmt: skip
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(escape(title), total=spec.trials, best="-")
        yield _ProgressCallback(progress, task, spec.trials)


@app.command()
@guarded
def report(
    run_dir: Annotated[
        Path | None, typer.Argument(help="Run folder (written from --storage when given)")
    ] = None,
    storage: Annotated[
        str | None, typer.Option(help="Shared study storage URL: report it from any host")
    ] = None,
    study: Annotated[str, typer.Option(help="Study name in --storage")] = "tuner",
) -> None:
    """Rebuild a run folder's report, CSVs, best.yaml and exports from its study."""
    if storage is not None:
        outcome = rebuild_from_storage(storage, study, run_dir)
    elif run_dir is None:
        raise InputError("give a run folder, or --storage URL --study NAME for a shared study")
    else:
        if (screen := screen_of(run_dir)) is not None:
            # The confirmed rows are measurements, written once; only the screen is a study.
            say(f"{run_dir} is a --screen run: confirm.csv, confirm.yaml, best.yaml and "
                f"report.html hold its measurements as measured; rebuilding the simulator "
                f"screen in {screen}")  # fmt: skip
            run_dir = screen
        outcome = rebuild(run_dir)
    console.print(f"rebuilt {len(outcome.records)} trials in {outcome.wall_s:.1f} s")
    _print_outcome(outcome)


@app.command()
@guarded
def export(
    run_dir: Annotated[Path, typer.Argument(help="Run folder")],
    trial: Annotated[int, typer.Option(help="Trial number to export")],
) -> None:
    """Write vLLM / SGLang / TensorRT-LLM launch files for any evaluated trial."""
    spec = load_run_spec(run_dir)
    from tuner.run.tune import open_study, readable_study
    from tuner.search.trials import record_from_frozen

    study = open_study(spec, run_dir, create=False)
    with readable_study(run_dir):
        found = [t for t in study.get_trials(deepcopy=False) if t.number == trial]
    if not found:
        raise InputError(f"{run_dir}: no trial {trial} (trials 0..{len(study.trials) - 1})")
    record = record_from_frozen(found[0])
    if record.config is None:
        raise InputError(f"trial {trial} has no engine config ({record.reason or record.state})")
    folder = run_dir / "exports" / f"trial-{trial}"
    exports = write_exports(record.config, spec, folder, record.metrics)
    if record.metrics is not None and not record.meets(spec.sla):
        say(f"note: trial {trial} does not meet the SLA "
            f"({record.reason or 'latency bound missed'})")  # fmt: skip
    for engine, exp in exports.items():
        if isinstance(exp, str):
            say(f"{engine}: not expressible: {exp}")
        else:
            say(f"{engine} {exp.version}", style="bold")
            say(exp.command)
            for note in exp.notes:
                say(f"  note: {note}")
    say(f"files: {folder}")
