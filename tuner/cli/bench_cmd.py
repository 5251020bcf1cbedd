"""`tuner bench`: benchmark a running OpenAI-compatible server (vLLM, SGLang, llama.cpp...)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tuner import catalog
from tuner.bench.lengths import workload_length_pairs
from tuner.bench.trace_plan import at_recorded_speed
from tuner.cli.app import app, err_console, finite_positive, guarded
from tuner.cli.options import ClientProtocolName, InputTokens, OutputTokens, Rate, Seed
from tuner.cli.output import cell, print_table, say
from tuner.cli.trace_lines import load_lines
from tuner.cli.trace_options import SessionsName, TraceFile
from tuner.errors import BackendError, InputError
from tuner.request import WORKLOAD_FLAGS, flag_error
from tuner.sla import sla_violations
from tuner.specs import (
    MAX_LENGTH_SPREAD,
    MAX_REQUESTS,
    MAX_SECONDS,
    MAX_USERS,
    SLA,
    Metrics,
    Workload,
)

# Environment variables holding the API key, first set wins; the key is never written anywhere.
API_KEY_ENV_VARS = ("TUNER_API_KEY", "OPENAI_API_KEY")


def api_key_from_env() -> str | None:
    """The API key from TUNER_API_KEY or OPENAI_API_KEY, if one is set."""
    return next((os.environ[v] for v in API_KEY_ENV_VARS if os.environ.get(v)), None)


# bench's own multi-line options, declared here so its signature reads one line per flag.
_Users = Annotated[
    int | None,
    typer.Option(min=1, max=MAX_USERS, help=f"Closed-loop users, 1..{MAX_USERS} (default 1)"),
]
_MeasuredRequests = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_REQUESTS,
        help=f"Measured requests, 1..{MAX_REQUESTS}, warm-up excluded (default: from load)",
    ),
]
_Spread = Annotated[
    float,
    typer.Option(
        min=0,
        max=MAX_LENGTH_SPREAD,
        help=f"Uniform +- fraction around isl/osl, 0..{MAX_LENGTH_SPREAD:g}",
    ),
]
_RequestTimeout = Annotated[
    float,
    typer.Option(
        callback=finite_positive,
        max=MAX_SECONDS,
        help=f"Per-request timeout, seconds (the pre-flight checks' too), at most {MAX_SECONDS:g}",
    ),
]
_Warmup = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=MAX_REQUESTS,
        help=f"Warm-up requests run in the load, not measured, 0..{MAX_REQUESTS}",
    ),
]


def _sla(name: str | None, ttft_ms: float | None, tpot_ms: float | None) -> SLA | None:
    if name is None and ttft_ms is None and tpot_ms is None:
        return None
    base = catalog.load_sla(name) if name else SLA()
    updates = {k: v for k, v in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)) if v is not None}
    return base.model_copy(update=updates) if updates else base


def _workload(
    isl: int,
    osl: int,
    rate: float | None,
    concurrency: int | None,
    n: int | None,
    spread: float,
    seed: int,
    warmup: int | None = None,
    lengths: str | None = None,
    protocol: str | None = None,
    trace: str | None = None,
    sessions: str | None = None,
) -> Workload:
    if rate is not None and concurrency is not None:
        raise InputError("--rate and --concurrency are exclusive: choose open or closed loop")
    try:
        return at_recorded_speed(  # a trace without --rate replays at its recorded times
            Workload(
                input_tokens=isl,
                output_tokens=osl,
                rate_rps=rate,
                concurrency=concurrency or (None if rate is not None or trace or sessions else 1),
                trace_file=trace,
                sessions=sessions,
                num_requests=n,
                length_spread=spread,
                seed=seed,
                warmup_requests=warmup,
                lengths_file=lengths,
                **({"protocol": protocol} if protocol is not None else {}),
            )
        )
    except ValidationError as exc:
        raise flag_error(exc, {**WORKLOAD_FLAGS, "length_spread": "--spread"}) from exc


def _table(m: Metrics) -> Table:
    t = Table(title=cell(f"{m.extra.get('model', '')}: latency (ms)"))  # the server's id
    t.add_column("metric")
    for col in ("mean", "P50", "P90", "P95", "P99"):
        t.add_column(col, justify="right")
    for label, p in (
        ("TTFT", m.ttft_ms),
        ("TPOT", m.tpot_ms),
        ("ITL", m.itl_ms),
        ("E2E", m.e2e_ms),
    ):
        t.add_row(label, *(f"{v:.1f}" for v in (p.mean, p.p50, p.p90, p.p95, p.p99)))
    return t


def _summary(m: Metrics, sla: SLA | None) -> list[str]:
    lines = [
        f"requests: {m.num_requests - m.failed_requests}/{m.num_requests} measured ok in "
        f"{m.extra.get('duration_s', 0):.1f} s after {m.warmup_requests} warm-up (not counted) "
        f"({m.extra.get('arrival')})",
        f"throughput: {m.output_tokens_per_s:.1f} output tok/s, {m.total_tokens_per_s:.1f} total "
        f"tok/s, {m.requests_per_s:.2f} req/s",
        f"lengths: input exact={m.extra.get('input_tokens_exact')}, output exact="
        f"{m.extra.get('output_tokens_exact')} (tokens counted from "
        f"{m.extra.get('output_tokens_from')})",
    ]
    if m.failed_requests:
        lines.append(f"failures: {m.extra.get('failure_reasons')}")
    if sla is not None:
        checks = [
            f"{v.describe(sla.percentile)}: {'ok' if v.met else 'MISSED'}"
            for v in sla_violations(m, sla)
        ]
        lines.append(
            f"SLA {sla.name}: " + "; ".join(checks) + f"; goodput {m.goodput_rps:.2f} req/s"
        )
    return lines


def _run_with_progress(endpoint: Any, workload: Workload, options: Any, sla: SLA | None) -> Metrics:
    """Run the load, with a progress bar on a terminal (plain output off one)."""
    from tuner.bench.loadgen import run_workload

    with Progress(
        TextColumn("benchmarking"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task("requests", total=workload.total_requests)
        metrics = run_workload(
            endpoint,
            workload,
            options=options,
            sla=sla,
            on_progress=lambda done, total: bar.update(task, completed=done),
        )
    return metrics


@app.command()
@guarded
def bench(
    url: Annotated[str, typer.Option(help="Server base URL, e.g. http://127.0.0.1:8000")],
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: first listed)")
    ] = None,
    isl: InputTokens = 128,
    osl: OutputTokens = 64,
    rate: Rate = None,
    concurrency: _Users = None,
    num_requests: _MeasuredRequests = None,
    lengths: Annotated[
        str | None, typer.Option(help="CSV/JSONL of (input, output) token lengths to sample")
    ] = None,
    spread: _Spread = 0.0,
    sla: Annotated[
        str | None, typer.Option(help="SLA preset for goodput (see `tuner slas`)")
    ] = None,
    ttft_ms: Annotated[
        float | None,
        typer.Option(callback=finite_positive, help="TTFT bound, overrides the preset"),
    ] = None,
    tpot_ms: Annotated[
        float | None,
        typer.Option(callback=finite_positive, help="TPOT bound, overrides the preset"),
    ] = None,
    api: Annotated[str, typer.Option(help="completions or chat")] = "completions",
    timeout: _RequestTimeout = 300.0,
    warmup: _Warmup = None,
    seed: Seed = 0,
    protocol: ClientProtocolName = None,
    trace: TraceFile = None,
    sessions: SessionsName = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the Metrics as JSON")] = False,
) -> None:
    """Benchmark a running OpenAI-compatible server; API key from TUNER_API_KEY/OPENAI_API_KEY."""
    from tuner.bench.loadgen import (
        Endpoint,
        LoadOptions,
        check_endpoint,
        check_url,
    )

    check_url(url)
    if api not in ("completions", "chat"):
        raise InputError(f"--api {api!r}: allowed values are completions, chat")
    workload = _workload(
        isl, osl, rate, concurrency, num_requests, spread, seed, warmup, lengths, protocol, trace,
        sessions,
    )  # fmt: skip
    workload_length_pairs(workload.lengths_file)  # a bad --lengths file: one InputError line
    target_sla = _sla(sla, ttft_ms, tpot_ms)
    endpoint = Endpoint(url, model=model, api=api, api_key=api_key_from_env())  # type: ignore[arg-type]
    options = LoadOptions(timeout_s=timeout)
    # An unreachable URL fails here, before any progress bar is drawn.
    check_endpoint(endpoint, timeout)
    metrics = _run_with_progress(endpoint, workload, options, target_sla)
    metrics.extra["protocol"] = workload.protocol
    if json_out:
        typer.echo(metrics.model_dump_json(indent=2))
    else:
        print_table(_table(metrics))
        for line in [*_summary(metrics, target_sla), *load_lines(metrics.extra, workload, 1)]:
            say(line)
    if not metrics.feasible:
        raise BackendError(metrics.reason or "the benchmark failed")
