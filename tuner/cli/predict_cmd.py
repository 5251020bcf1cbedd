"""`tuner predict`: one variant under one workload (sim predicts; torch and vllm measure)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tuner.backends import BACKENDS, evaluate_request
from tuner.bench.protocols import protocol_line
from tuner.cli.app import app, console, guarded
from tuner.cli.deployment_cmd import DeploymentPath, NodeName, predict_deployment
from tuner.cli.knob_flags import knob_options
from tuner.cli.latency_table import band_text, latency_table
from tuner.cli.options import (
    AcceptanceRate,
    BackendName,
    ClientProtocolName,
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
    WorkloadKindName,
)
from tuner.cli.output import cell, print_note, print_table, say
from tuner.cli.trace_lines import trace_lines
from tuner.cli.trace_options import SessionsName, TraceFile
from tuner.detect import local_gpu_profile
from tuner.errors import InputError, echo
from tuner.export.registry import engine_label
from tuner.perf.memory import replica_gpus
from tuner.perf.speculative import acceptance_note
from tuner.request import build_request, prediction_doc
from tuner.specs import EngineConfig, GPUProfile, Metrics, Workload

__all__ = ["predict"]


def _summary_lines(m: Metrics, wl: Workload, config: EngineConfig) -> list[str]:
    lines = [
        f"throughput: {m.output_tokens_per_s:.1f} output tok/s{band_text(m, 'throughput')} "
        f"({m.output_tokens_per_s_per_gpu:.1f} per GPU), {m.total_tokens_per_s:.1f} total tok/s, "
        f"{m.requests_per_s:.2f} req/s, goodput {m.goodput_rps:.2f} req/s",
        f"memory: weights {m.weights_gib:.2f} GiB/GPU, KV capacity {m.kv_capacity_tokens} tokens, "
        f"max concurrent sequences {m.max_concurrent_seqs}, peak KV use {m.kv_utilization:.0%}, "
        f"preemptions {m.preemptions}",
        f"requests: {m.num_requests} measured after {m.warmup_requests} warm-up (not counted)",
    ]
    if wl.trace_file is None and wl.sessions is None:  # a trace's line says how it was sent
        lines.append(protocol_line(wl))
    if m.extra.get("engine_version"):  # the simulator says which engine release it modelled
        lines.insert(
            0,
            f"engine: {engine_label(config, m)}: scheduler and overheads from its source "
            "(docs/engines.md)",
        )
    if note := acceptance_note(config, m):  # a speculating variant: what its speed-up rests on
        lines.append(note.line())
    if "capacity_rps_per_gpu" in m.extra:
        lines.append(
            f"capacity meeting the SLA: {m.extra['capacity_rps_per_gpu']:.2f} req/s per GPU"
            f"{band_text(m, 'capacity')}"
        )
    lines.extend(trace_lines(m.extra, wl, replica_gpus(config)))
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
    trace: TraceFile = None,
    sessions: SessionsName = None,
    sla: Annotated[str, typer.Option(help="SLA preset used for goodput")] = "chat",
    workload_kind: WorkloadKindName = None,
    protocol: ClientProtocolName = None,
    backend: BackendName = "sim",
    model_path: ModelPath = None,
    compile_step: CompileStep = False,
    deployment: DeploymentPath = None,
    node: NodeName = None,
    as_json: JsonObject = False,
    knob_flags: dict[str, str | None] | None = None,
) -> None:
    """Predict (or, with --backend torch|vllm, measure) one variant under one workload."""
    if backend not in BACKENDS:
        raise InputError(f"--backend {echo(backend)} is not one of: {', '.join(BACKENDS)}")
    if (deployment is not None or node is not None) and backend != "sim":
        raise InputError("--deployment and --node are predicted by the simulator (--backend sim)")
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
        trace=trace,
        sessions=sessions,
        kind=workload_kind,
        protocol=protocol,
    )
    if deployment is not None:
        predict_deployment(config, ctx, deployment, node, as_json)
        return
    metrics = evaluate_request(
        config, ctx, backend=backend, model_path=model_path, compile_step=compile_step
    )
    if as_json:
        typer.echo(json.dumps(prediction_doc(metrics, config, ctx)))
        return
    # A measuring backend ran on a real device, which need not be the GPU profile named.
    where = (
        f"{replica_gpus(config)}x {ctx.gpu.name}"
        if backend == "sim"
        else str(metrics.extra.get("device", "?"))
    )
    verb = "predicted" if backend == "sim" else "measured"
    title = cell(
        f"{ctx.model.name} on {where} ({config.quantization.value}), {verb} by [{backend}]"
    )
    if not metrics.feasible:  # a measured reason may quote the server: cell() escapes it
        console.print(f"{title}: infeasible: {cell(metrics.reason or '')}", highlight=False)
        return
    print_table(latency_table(metrics, title))
    for line in _summary_lines(metrics, ctx.workload, config):
        say(line)
