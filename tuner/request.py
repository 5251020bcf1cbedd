"""One variant and its context from the text a user typed (`tuner predict`'s flags).

Knob values parse through the knob registry, the workload through its pydantic model, names
through the catalog, and the result through every rule of `tuner.validity` (the rules `tune`
samples within); any failure is one InputError line naming the flag.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tuner import catalog, knobs
from tuner.bench.lengths import workload_length_pairs
from tuner.bench.trace_plan import at_recorded_speed
from tuner.errors import InputError
from tuner.perf.memory import replica_gpus
from tuner.specs import (
    Context,
    EngineConfig,
    GPUProfile,
    Metrics,
    Workload,
    arrival_conflict,
    draft_to_load,
)
from tuner.validity import invalid_reason

__all__ = [
    "WORKLOAD_FLAGS",
    "build_request",
    "flag_error",
    "prediction_doc",
]


def _check_cross_fields(
    knob_values: dict[str, Any],
    acceptance: float | None,
    rate: float | None,
    concurrency: int | None,
) -> None:
    """Cross-flag errors, each naming both flags (vLLM config style)."""
    if reason := arrival_conflict(
        rate, concurrency, rate_name="--rate ", concurrency_name="--concurrency "
    ):
        raise InputError(reason)
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


def flag_error(exc: ValidationError, flags: dict[str, str]) -> InputError:
    """One line naming the flag of the first bad field (its field name when it has no flag)."""
    e = exc.errors()[0]
    msg = str(e["msg"]).removeprefix("Value error, ")
    if not e["loc"]:  # a cross-field check of the model: its message names the values
        return InputError(msg)
    field = str(e["loc"][0])
    return InputError(f"{flags.get(field, field)}: {msg} (got {e.get('input')!r})")


WORKLOAD_FLAGS = {
    "input_tokens": "--isl",
    "output_tokens": "--osl",
    "rate_rps": "--rate",
    "concurrency": "--concurrency",
    "num_requests": "--num-requests",
    "warmup_requests": "--warmup",
    "lengths_file": "--lengths",
    "trace_file": "--trace",
    "sessions": "--sessions",
    "prefix_cache_hit": "--prefix-cache-hit",
    "acceptance_rate": "--acceptance",
    "kind": "--workload-kind",
    "protocol": "--protocol",
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
    kind: str | None = None,
    protocol: str | None = None,
    trace: str | None = None,
    sessions: str | None = None,
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
        raise flag_error(exc, {k.name: k.flag for k in knobs.registered()}) from exc
    wl_fields: dict[str, Any] = {
        "input_tokens": isl,
        "output_tokens": osl,
        "rate_rps": rate,
        "concurrency": concurrency,
        "num_requests": num_requests,
        "warmup_requests": warmup,
        "lengths_file": lengths,
        "trace_file": trace,
        "sessions": sessions,
        "prefix_cache_hit": prefix_cache_hit,
        "kind": kind,
    }
    if protocol is not None:
        wl_fields["protocol"] = protocol
    if acceptance is not None:
        # One flag for both kinds of draft: the user states the acceptance of the draft they chose.
        wl_fields["acceptance_rate"] = acceptance
        wl_fields["ngram_acceptance_rate"] = acceptance
    try:
        workload = Workload(**wl_fields)
    except ValidationError as exc:
        raise flag_error(exc, WORKLOAD_FLAGS) from exc
    workload_length_pairs(workload.lengths_file)  # a bad --lengths file: one InputError line
    workload = at_recorded_speed(workload)  # a bad --trace or --sessions: one InputError line
    draft_name = draft_to_load(config)
    draft = catalog.load_model(draft_name) if draft_name else None
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


def prediction_doc(metrics: Metrics, config: EngineConfig, ctx: Context) -> dict[str, Any]:
    """`predict --json`'s object: the metrics with the model, GPU, variant and workload."""
    doc = metrics.model_dump(mode="json")
    doc["model"] = ctx.model.name
    doc["gpu"] = ctx.gpu.name
    doc["config"] = config.model_dump(mode="json")
    doc["workload"] = ctx.workload.model_dump(mode="json")
    return doc
