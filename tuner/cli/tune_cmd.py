"""`tuner tune`, `tuner report DIR`, `tuner export --trial N DIR`: thin CLI over tuner.run.tune
and tuner.screen."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import optuna
import typer

from tuner.cli.app import app, console, guarded
from tuner.cli.knob_flags import knob_options
from tuner.cli.options import (
    AcceptanceRate,
    BackendName,
    CapacityLoad,
    CapacityProbes,
    CapacityProbeSeconds,
    ClientProtocolName,
    CompileStep,
    FixedLoadRate,
    FixedLoadUsers,
    GPUName,
    Jobs,
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
    Seed,
    SLAName,
    SpaceName,
    StudyName,
    TensorParallelGPUs,
    TimeBudget,
    TPOTBound,
    TrialBudget,
    TTFTBound,
    WorkloadKindName,
)
from tuner.cli.output import print_note, say
from tuner.cli.screen_cmd import run_screened, screen_options
from tuner.cli.trace_options import SessionsName, TraceFile
from tuner.cli.tune_progress import progress
from tuner.cli.tune_summary import print_outcome
from tuner.detect import local_gpu_profile
from tuner.errors import InputError
from tuner.run.export_trial import export_trial
from tuner.run.inputs import check_overrides, default_num_gpus, target_folder, with_budgets
from tuner.run.tune import rebuild, tune
from tuner.run.worker import rebuild_from_storage
from tuner.run_spec import DEFAULT_TRIALS, RunSpec, build_run_spec, load_run_spec
from tuner.screen.journal import load_resumed, screen_of
from tuner.screen.options import ScreenOptions
from tuner.specs import DEFAULT_SAMPLER, GPUProfile

__all__ = ["export", "report", "tune_command"]

RepeatConfig = Annotated[Path | None, typer.Option(help="run.yaml of an earlier run to repeat")]


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
    trace: TraceFile = None,
    sessions: SessionsName = None,
    prefix_cache_hit: MaybePrefixCacheHit = None,
    acceptance: AcceptanceRate = None,
    ngram_acceptance: NgramAcceptanceRate = None,
    workload_kind: WorkloadKindName = None,
    protocol: ClientProtocolName = None,
    backend: BackendName = "sim",
    model_path: ModelPath = None,
    compile_step: CompileStep = False,
    model_source: Annotated[str | None, typer.Option(help="Model id in the exports")] = None,
    sampler: Annotated[str, typer.Option(help="tpe | nsga2 | random | grid")] = DEFAULT_SAMPLER,
    trials: TrialBudget = None,
    timeout: TimeBudget = None,
    seed: Seed = 0,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL (shared study)")] = None,
    study: StudyName = "tuner",
    out: OutDir = Path("reports"),
    run_dir: RunDir = None,
    config: RepeatConfig = None,
    resume: Annotated[Path | None, typer.Option(help="Run folder to resume")] = None,
    knob_flags: dict[str, str | None] | None = None,
    screen_flags: ScreenOptions | None = None,
    jobs: Jobs = 1,
) -> None:
    """Search engine configs for the highest throughput per GPU that meets the SLA."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_overrides(_given(ctx), resume=resume is not None, config=config is not None)
    if jobs < 1:
        raise InputError(f"--jobs {jobs}: must be at least 1")
    if resume is not None:
        spec, screen_flags = load_resumed(resume, screen_flags)
    elif config is not None:
        spec = load_run_spec(config)
    else:
        spec = _new_spec(ctx.params, knob_flags)
    folder, fresh = target_folder(spec, resume=resume, run_dir=run_dir, out=out, now=datetime.now())
    spec = with_budgets(spec, trials, timeout)
    if screen_flags is not None:  # a screened tune: sim screen, measured confirmation
        resumed = resume is not None
        return run_screened(spec, folder, fresh, screen_flags, jobs, progress, resume=resumed)
    _tune_and_print(spec, folder, resume=resume is not None, fresh=fresh, jobs=jobs)


def _given(ctx: typer.Context) -> list[str]:
    """The parameters given on the command line (not defaulted, not from the environment)."""
    return [
        name
        for name in ctx.params
        if (source := ctx.get_parameter_source(name)) is not None and source.name == "COMMANDLINE"
    ]


def _new_spec(p: dict[str, Any], knob_flags: dict[str, str | None] | None) -> RunSpec:
    """The spec of a new run from the tune command's parameters (`ctx.params`)."""
    backend = p["backend"]
    workload = {
        "input_tokens": p["isl"],
        "output_tokens": p["osl"],
        "concurrency": p["concurrency"],
        "rate_rps": p["rate"],
        "num_requests": p["num_requests"],
        "prefix_cache_hit": p["prefix_cache_hit"],
        "lengths_file": p["lengths"],
        "trace_file": p["trace"],
        "sessions": p["sessions"],
        "acceptance_rate": p["acceptance"],
        "ngram_acceptance_rate": p["ngram_acceptance"],
        "kind": p["workload_kind"],
        "protocol": p["protocol"],
    }
    return build_run_spec(
        model=_required_model(p["model"]),
        gpu=p["gpu"] or _local_gpu(backend),
        sla=p["sla"],
        ttft_ms=p["ttft_ms"],
        tpot_ms=p["tpot_ms"],
        percentile=p["percentile"],
        space=p["space"],
        num_gpus=p["num_gpus"] or default_num_gpus(backend),
        workload_file=p["workload"],
        workload_fields=workload,
        backend=backend,
        model_path=p["model_path"],
        model_source=p["model_source"],
        sampler=p["sampler"],
        trials=p["trials"] or DEFAULT_TRIALS,
        timeout_s=p["timeout"],
        seed=p["seed"],
        storage=p["storage"],
        study_name=p["study"],
        compile_step=p["compile_step"],
        knob_flags=knob_flags,
        capacity_load=p["capacity_load"],
        probes=p["probes"],
        probe_seconds=p["probe_seconds"],
    )


def _tune_and_print(spec: RunSpec, folder: Path, *, resume: bool, fresh: bool, jobs: int) -> None:
    """An unscreened tune with its progress display, then its summary."""
    with progress(spec) as callback:
        outcome = tune(spec, folder, resume=resume, fresh=fresh, callbacks=[callback], jobs=jobs)
    for line in outcome.worker_errors:
        print_note(f"warning: {line}")
    finished = sum(r.state in ("complete", "pruned") for r in outcome.records)
    say(
        f"{finished} trials ({outcome.evaluations} evaluations by {spec.backend}) in "
        f"{outcome.wall_s:.1f} s"
    )
    if steps := outcome.refinement_trials:
        say(
            f"refined: {len(steps)} of them stepped from the pick to its best one-knob "
            f"neighbour (trials {', '.join(map(str, steps))})"
        )
    print_outcome(outcome)


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
            # The measured rows are measurements, written once; only the screen is a study.
            say(
                f"{run_dir} is a --screen run: confirm.csv, confirm.yaml, best.yaml and "
                "report.html hold its measurements as measured; rebuilding the simulator "
                f"screen in {screen}"
            )
            run_dir = screen
        outcome = rebuild(run_dir)
    console.print(f"rebuilt {len(outcome.records)} trials in {outcome.wall_s:.1f} s")
    print_outcome(outcome)


@app.command()
@guarded
def export(
    run_dir: Annotated[Path, typer.Argument(help="Run folder")],
    trial: Annotated[int, typer.Option(help="Trial number to export")],
) -> None:
    """Write vLLM / SGLang / TensorRT-LLM launch files for any evaluated trial."""
    done = export_trial(run_dir, trial)
    if done.misses_sla is not None:
        say(f"note: trial {trial} does not meet the SLA ({done.misses_sla})")
    for engine, exp in done.exports.items():
        if isinstance(exp, str):
            say(f"{engine}: not expressible: {exp}")
        else:
            say(f"{engine} {exp.version}", style="bold")
            say(exp.command)
            for note in exp.notes:
                say(f"  note: {note}")
    say(f"files: {done.folder}")
