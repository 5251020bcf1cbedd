"""`tuner predict`: one variant under one workload (sim predicts; torch and vllm measure)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from tuner import catalog
from tuner.backends import BACKENDS, get_backend
from tuner.cli.app import app, console, guarded
from tuner.cli.output import print_note, print_table, say
from tuner.detect import local_gpu_profile
from tuner.errors import InputError, echo
from tuner.perf.predict import NGRAM
from tuner.specs import Context, EngineConfig, KVDtype, Metrics, Quantization, Workload

__all__ = ["build_request", "predict"]


def _choice(flag: str, value: str, enum: type[Quantization] | type[KVDtype]) -> Any:
    allowed = [e.value for e in enum]
    if value not in allowed:
        raise InputError(f"{flag} {value!r} is not one of: {', '.join(allowed)}")
    return enum(value)


def _check_cross_fields(
    spec_tokens: int | None,
    draft_model: str | None,
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
    if spec_tokens and not draft_model:
        raise InputError(f"--spec-tokens {spec_tokens} needs --draft-model (a model name or ngram)")
    if draft_model and not spec_tokens:
        raise InputError(f"--draft-model {draft_model} needs --spec-tokens K (1..8)")
    if acceptance is not None and not spec_tokens:
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


_CONFIG_FLAGS = {
    "tensor_parallel_size": "--tp",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-batched-tokens",
    "num_speculative_tokens": "--spec-tokens",
    "draft_model": "--draft-model",
}
_WORKLOAD_FLAGS = {
    "input_tokens": "--isl",
    "output_tokens": "--osl",
    "rate_rps": "--rate",
    "concurrency": "--concurrency",
    "num_requests": "--num-requests",
    "prefix_cache_hit": "--prefix-cache-hit",
    "acceptance_rate": "--acceptance",
}


def build_request(
    *,
    model: str,
    gpu: str,
    tp: int = 1,
    quant: str = "bf16",
    kv_dtype: str = "auto",
    max_num_seqs: int = 256,
    max_batched_tokens: int = 8192,
    spec_tokens: int | None = None,
    draft_model: str | None = None,
    acceptance: float | None = None,
    prefix_cache_hit: float = 0.0,
    isl: int = 1024,
    osl: int = 256,
    concurrency: int | None = None,
    rate: float | None = None,
    num_requests: int = 200,
    sla: str = "chat",
) -> tuple[EngineConfig, Context]:
    """Validate predict's flags into (EngineConfig, Context); one-line InputError otherwise."""
    _check_cross_fields(spec_tokens, draft_model, acceptance, rate, concurrency)
    quantization = _choice("--quant", quant, Quantization)
    kv = _choice("--kv-dtype", kv_dtype, KVDtype)
    try:
        config = EngineConfig(
            quantization=quantization,
            kv_dtype=kv,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_batched_tokens,
            tensor_parallel_size=tp,
            num_speculative_tokens=spec_tokens or 0,
            draft_model=draft_model,
        )
    except ValidationError as exc:
        raise _flag_error(exc, _CONFIG_FLAGS) from exc
    wl_fields: dict[str, Any] = {
        "input_tokens": isl,
        "output_tokens": osl,
        "rate_rps": rate,
        "concurrency": concurrency,
        "num_requests": num_requests,
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
    draft = None
    if draft_model and draft_model != NGRAM:
        draft = catalog.load_model(draft_model)
    ctx = Context(
        model=catalog.load_model(model),
        gpu=catalog.load_gpu(gpu),
        sla=catalog.load_sla(sla),
        workload=workload,
        num_gpus=tp,
        draft=draft,
    )
    return config, ctx


def _table(m: Metrics, title: str) -> Table:
    t = Table(title=title)
    t.add_column("latency (ms)")
    for col in ("mean", "P50", "P90", "P95", "P99"):
        t.add_column(col, justify="right")
    for label, p in (("TTFT", m.ttft_ms), ("TPOT", m.tpot_ms), ("ITL", m.itl_ms),
                     ("E2E", m.e2e_ms), ("queue", m.queue_ms)):  # fmt: skip
        t.add_row(label, *(f"{v:.2f}" for v in (p.mean, p.p50, p.p90, p.p95, p.p99)))
    return t


def _summary_lines(m: Metrics) -> list[str]:
    lines = [
        f"throughput: {m.output_tokens_per_s:.1f} output tok/s ({m.output_tokens_per_s_per_gpu:.1f}"
        f" per GPU), {m.total_tokens_per_s:.1f} total tok/s, {m.requests_per_s:.2f} req/s, "
        f"goodput {m.goodput_rps:.2f} req/s",
        f"memory: weights {m.weights_gib:.2f} GiB/GPU, KV capacity {m.kv_capacity_tokens} tokens, "
        f"max concurrent sequences {m.max_concurrent_seqs}, peak KV use {m.kv_utilization:.0%}, "
        f"preemptions {m.preemptions}",
    ]
    if "capacity_rps_per_gpu" in m.extra:
        lines.append(
            f"capacity meeting the SLA: {m.extra['capacity_rps_per_gpu']:.2f} req/s per GPU"
        )
    return lines


@app.command()
@guarded
def predict(
    model: Annotated[str, typer.Option(help="Model name, YAML card or HF config.json")],
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU profile name, NVML alias or YAML (torch/vllm: the local GPU)"),
    ] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (GPUs)")] = 1,
    quant: Annotated[str, typer.Option(help="Weight quantization")] = "bf16",
    kv_dtype: Annotated[str, typer.Option(help="KV-cache dtype: auto, fp8, int8")] = "auto",
    max_num_seqs: Annotated[int, typer.Option(help="Max concurrent sequences")] = 256,
    max_batched_tokens: Annotated[int, typer.Option(help="Token budget per step")] = 8192,
    spec_tokens: Annotated[int | None, typer.Option(help="Speculative tokens per step")] = None,
    draft_model: Annotated[str | None, typer.Option(help="Draft model name, or ngram")] = None,
    acceptance: Annotated[float | None, typer.Option(help="Per-token acceptance rate")] = None,
    prefix_cache_hit: Annotated[float, typer.Option(help="Cached fraction of prompts")] = 0.0,
    isl: Annotated[int, typer.Option(help="Input tokens per request")] = 1024,
    osl: Annotated[int, typer.Option(help="Output tokens per request")] = 256,
    concurrency: Annotated[int | None, typer.Option(help="Closed-loop users")] = None,
    rate: Annotated[float | None, typer.Option(help="Poisson arrival rate, req/s")] = None,
    num_requests: Annotated[int, typer.Option(help="Requests to replay")] = 200,
    sla: Annotated[str, typer.Option(help="SLA preset used for goodput")] = "chat",
    backend: Annotated[str, typer.Option(help="sim predicts; torch and vllm measure")] = "sim",
    model_path: Annotated[str | None, typer.Option(help="Weights folder for torch/vllm")] = None,
    compile_step: Annotated[
        bool, typer.Option("--compile", help="torch backend: torch.compile the engine step")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """Predict (or, with --backend torch|vllm, measure) one variant under one workload."""
    if backend not in BACKENDS:
        raise InputError(f"--backend {echo(backend)} is not one of: {', '.join(BACKENDS)}")
    if gpu is None:
        gpu, note = local_gpu_profile(backend)
        print_note(note)
    config, ctx = build_request(
        model=model, gpu=gpu, tp=tp, quant=quant, kv_dtype=kv_dtype, max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens, spec_tokens=spec_tokens, draft_model=draft_model,
        acceptance=acceptance, prefix_cache_hit=prefix_cache_hit, isl=isl, osl=osl,
        concurrency=concurrency, rate=rate, num_requests=num_requests, sla=sla,
    )  # fmt: skip
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
    where = f"{tp}x {ctx.gpu.name}" if backend == "sim" else str(metrics.extra.get("device", "?"))
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
