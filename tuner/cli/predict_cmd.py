"""`tuner predict`: one variant under one workload (sim predicts; torch and vllm measure)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from tuner import catalog, knobs
from tuner.backends import BACKENDS, get_backend
from tuner.bench.lengths import workload_length_pairs
from tuner.cli.app import app, console, guarded
from tuner.cli.knob_flags import knob_options
from tuner.cli.options import (
    AcceptanceRate,
    BackendName,
    CompileStep,
    Concurrency,
    GPUName,
    InputTokens,
    JsonObject,
    LengthsFile,
    ModelName,
    ModelPath,
    NumRequests,
    OutputTokens,
    PrefixCacheHit,
    Rate,
)
from tuner.cli.output import print_note, print_table, say
from tuner.detect import local_gpu_profile
from tuner.errors import InputError, echo
from tuner.perf.memory import replica_gpus
from tuner.perf.predict import NGRAM
from tuner.specs import Context, EngineConfig, GPUProfile, Metrics, Workload
from tuner.validity import invalid_reason

__all__ = ["build_request", "predict"]


def _check_cross_fields(
    knob_values: dict[str, Any],
    acceptance: float | None,
    rate: float | None,
    concurrency: int | None,
) -> None:
    """Cross-flag errors, each naming both flags (vLLM config style)."""
    if rate is not None and concurrency is not None:
        raise InputError(
            f"--rate {rate:g} and --concurrency {concurrency} are exclusive: choose an open-loop "
            "Poisson rate or a closed-loop user count"
        )
    for knob in knobs.registered():
        needed = knob.needs and knobs.get(knob.needs)
        value = knob_values.get(knob.name, knob.default)
        if needed and knob_values.get(needed.name) and value == knob.default:
            span = f"{int(knob.ge or 0) + 1}..{int(knob.le)}" if knob.le is not None else "> 0"
            raise InputError(
                f"{needed.flag} {knob_values[needed.name]} needs {knob.flag} K ({span})"
            )
    if acceptance is not None and not knob_values.get("num_speculative_tokens"):
        raise InputError(
            f"--acceptance {acceptance:g} only applies with --spec-tokens and --draft-model"
        )


def _flag_error(exc: ValidationError, flags: dict[str, str]) -> InputError:
    e = exc.errors()[0]
    msg = str(e["msg"]).removeprefix("Value error, ")
    if not e["loc"]:  # a cross-field check of the model: its message names the values
        return InputError(msg)
    field = str(e["loc"][0])
    return InputError(f"{flags.get(field, field)}: {msg} (got {e.get('input')!r})")


_WORKLOAD_FLAGS = {
    "input_tokens": "--isl",
    "output_tokens": "--osl",
    "rate_rps": "--rate",
    "concurrency": "--concurrency",
    "num_requests": "--num-requests",
    "warmup_requests": "--warmup",
    "lengths_file": "--lengths",
    "prefix_cache_hit": "--prefix-cache-hit",
    "acceptance_rate": "--acceptance",
}


def build_request(
    *,
    model: str,
    gpu: str | GPUProfile,
    knob_flags: dict[str, str | None] | None = None,
    acceptance: float | None = None,
    prefix_cache_hit: float = 0.0,
    isl: int = 1024,
    osl: int = 256,
    concurrency: int | None = None,
    rate: float | None = None,
    num_requests: int | None = None,
    sla: str = "chat",
    warmup: int | None = None,
    lengths: str | None = None,
) -> tuple[EngineConfig, Context]:
    """Validate predict's flags into (EngineConfig, Context); one-line InputError otherwise,
    including every rule of tuner.validity (the same rules `tune` samples within)."""
    given = {k: v for k, v in (knob_flags or {}).items() if v is not None}
    try:
        values = {k: knobs.get(k).parse(text) for k, text in given.items()}
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    _check_cross_fields(values, acceptance, rate, concurrency)
    try:
        config = EngineConfig(**values)
    except ValidationError as exc:
        raise _flag_error(exc, {k.name: k.flag for k in knobs.registered()}) from exc
    wl_fields: dict[str, Any] = {
        "input_tokens": isl,
        "output_tokens": osl,
        "rate_rps": rate,
        "concurrency": concurrency,
        "num_requests": num_requests,
        "warmup_requests": warmup,
        "lengths_file": lengths,
        "prefix_cache_hit": prefix_cache_hit,
    }
    if acceptance is not None:
        # One flag for both kinds of draft: the user states the acceptance of the draft they chose.
        wl_fields["acceptance_rate"] = acceptance
        wl_fields["ngram_acceptance_rate"] = acceptance
    try:
        workload = Workload(**wl_fields)
    except ValidationError as exc:
        raise _flag_error(exc, _WORKLOAD_FLAGS) from exc
    workload_length_pairs(workload.lengths_file)  # a bad --lengths file: one InputError line
    draft = None
    if config.draft_model and config.draft_model != NGRAM:
        draft = catalog.load_model(config.draft_model)
    ctx = Context(
        model=catalog.load_model(model),
        gpu=catalog.load_gpu(gpu),
        sla=catalog.load_sla(sla),
        workload=workload,
        num_gpus=replica_gpus(config),
        draft=draft,
    )
    if reason := invalid_reason(config, ctx):
        raise InputError(reason)
    return config, ctx


def _pm(m: Metrics, quantity: str) -> str:
    """' +- 12%' when the prediction carries an error band for `quantity` (sim only)."""
    band = m.extra.get(f"{quantity}_band_pct")
    return f" +- {band:.0f}%" if isinstance(band, float | int) else ""


def _table(m: Metrics, title: str) -> Table:
    t = Table(title=title)
    t.add_column("latency (ms)")
    banded = "ttft_band_pct" in m.extra
    for col in ("mean", "P50", "P90", "P95", "P99", *(("band",) if banded else ())):
        t.add_column(col, justify="right")
    # ITL is the decode step the TPOT band describes; the queue time has no validation rows.
    for label, p, q in (
        ("TTFT", m.ttft_ms, "ttft"),
        ("TPOT", m.tpot_ms, "tpot"),
        ("ITL", m.itl_ms, "tpot"),
        ("E2E", m.e2e_ms, "e2e"),
        ("queue", m.queue_ms, ""),
    ):
        band = (_pm(m, q).strip() or "-",) if banded else ()
        t.add_row(label, *(f"{v:.2f}" for v in (p.mean, p.p50, p.p90, p.p95, p.p99)), *band)
    return t


def _summary_lines(m: Metrics) -> list[str]:
    lines = [
        f"throughput: {m.output_tokens_per_s:.1f} output tok/s{_pm(m, 'throughput')} "
        f"({m.output_tokens_per_s_per_gpu:.1f} per GPU), {m.total_tokens_per_s:.1f} total tok/s, "
        f"{m.requests_per_s:.2f} req/s, goodput {m.goodput_rps:.2f} req/s",
        f"memory: weights {m.weights_gib:.2f} GiB/GPU, KV capacity {m.kv_capacity_tokens} tokens, "
        f"max concurrent sequences {m.max_concurrent_seqs}, peak KV use {m.kv_utilization:.0%}, "
        f"preemptions {m.preemptions}",
        f"requests: {m.num_requests} measured after {m.warmup_requests} warm-up (not counted)",
    ]
    if "acceptance" in m.extra:  # a speculating variant: what its speed-up rests on
        lines.append(f"speculation: {m.extra['acceptance']}")
    if "capacity_rps_per_gpu" in m.extra:
        lines.append(
            f"capacity meeting the SLA: {m.extra['capacity_rps_per_gpu']:.2f} req/s per GPU"
            f"{_pm(m, 'capacity')}"
        )
    if m.extra.get("band_source"):
        lines.append(
            f"band: {m.extra['band_source']}; a measurement lies within +- band of the "
            "prediction about 9 times in 10"
        )
    return lines


@app.command()
@guarded
@knob_options("value")
def predict(
    model: ModelName,
    gpu: GPUName = None,
    acceptance: AcceptanceRate = None,
    prefix_cache_hit: PrefixCacheHit = 0.0,
    isl: InputTokens = 1024,
    osl: OutputTokens = 256,
    concurrency: Concurrency = None,
    rate: Rate = None,
    num_requests: NumRequests = None,
    warmup: Annotated[
        int | None, typer.Option(help="Warm-up requests, run but not measured (default: auto)")
    ] = None,
    lengths: LengthsFile = None,
    sla: Annotated[str, typer.Option(help="SLA preset used for goodput")] = "chat",
    backend: BackendName = "sim",
    model_path: ModelPath = None,
    compile_step: CompileStep = False,
    as_json: JsonObject = False,
    knob_flags: dict[str, str | None] | None = None,
) -> None:
    """Predict (or, with --backend torch|vllm, measure) one variant under one workload."""
    if backend not in BACKENDS:
        raise InputError(f"--backend {echo(backend)} is not one of: {', '.join(BACKENDS)}")
    profile: str | GPUProfile | None = gpu
    if profile is None:
        profile, note = local_gpu_profile(backend)
        print_note(note)
    config, ctx = build_request(
        model=model,
        gpu=profile,
        knob_flags=knob_flags,
        acceptance=acceptance,
        prefix_cache_hit=prefix_cache_hit,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        rate=rate,
        num_requests=num_requests,
        sla=sla,
        warmup=warmup,
        lengths=lengths,
    )
    options: dict[str, Any] = {}
    if backend == "sim":
        options["capacity"] = True
    elif model_path is not None:
        options["model_path"] = model_path
    if compile_step:
        if backend != "torch":
            raise InputError(f"--compile applies to --backend torch only (got --backend {backend})")
        options["compile"] = True
    metrics = get_backend(backend, **options).evaluate(config, ctx)
    if as_json:
        doc = metrics.model_dump(mode="json")
        doc["model"] = ctx.model.name
        doc["gpu"] = ctx.gpu.name
        doc["config"] = config.model_dump(mode="json")
        doc["workload"] = ctx.workload.model_dump(mode="json")
        typer.echo(json.dumps(doc))
        return
    # A measuring backend ran on a real device, which need not be the GPU profile named.
    where = (
        f"{replica_gpus(config)}x {ctx.gpu.name}"
        if backend == "sim"
        else str(metrics.extra.get("device", "?"))
    )
    verb = "predicted" if backend == "sim" else "measured"
    title = escape(
        f"{ctx.model.name} on {where} ({config.quantization.value}), {verb} by [{backend}]"
    )
    if not metrics.feasible:
        console.print(f"{title}: infeasible: {escape(metrics.reason or '')}", highlight=False)
        return
    print_table(_table(metrics, title))
    for line in _summary_lines(metrics):
        say(line)
