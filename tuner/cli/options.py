"""Command-line options that several commands share, each declared once with its help line.

A command names the alias (`isl: InputTokens = 1024`); the default stays with the command.
An option that is required in one command and optional in another shares its `typer.Option`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import finite_positive
from tuner.run_spec import MAX_NUM_GPUS, MAX_TRIALS
from tuner.specs import (
    MAX_RATE_RPS,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_USERS,
)

__all__ = [
    "AcceptanceRate",
    "BackendName",
    "CapacityLoad",
    "CapacityProbeSeconds",
    "CapacityProbes",
    "CompileStep",
    "Concurrency",
    "FixedLoadRate",
    "FixedLoadUsers",
    "GPUName",
    "InputTokens",
    "Jobs",
    "MAX_JOBS",
    "JsonObject",
    "LengthsFile",
    "MaybeInputTokens",
    "MaybeModelName",
    "MaybeOutputTokens",
    "MaybePrefixCacheHit",
    "ModelName",
    "ModelPath",
    "NgramAcceptanceRate",
    "NumRequests",
    "OutDir",
    "OutputTokens",
    "PrefixCacheHit",
    "Rate",
    "RunDir",
    "SLAName",
    "Seed",
    "SpaceName",
    "StudyName",
    "TPOTBound",
    "TTFTBound",
    "TensorParallelGPUs",
    "TimeBudget",
    "TrialBudget",
]

_MODEL = typer.Option("--model", help="Model name, YAML card or HF config.json")
# Every size an option takes is bounded (tuner.specs' MAX_* constants), and the help says so.
_ISL = typer.Option(
    "--isl",
    min=1,
    max=MAX_REQUEST_TOKENS,
    help=f"Input tokens per request, 1..{MAX_REQUEST_TOKENS}",
)
_OSL = typer.Option(
    "--osl",
    min=1,
    max=MAX_REQUEST_TOKENS,
    help=f"Output tokens per request, 1..{MAX_REQUEST_TOKENS}",
)
_PREFIX = typer.Option("--prefix-cache-hit", help="Cached fraction of each prompt")

ModelName = Annotated[str, _MODEL]
MaybeModelName = Annotated[str | None, _MODEL]
GPUName = Annotated[
    str | None,
    typer.Option(help="GPU profile name, NVML alias or YAML (torch/vllm: the local GPU)"),
]
SLAName = Annotated[str, typer.Option(help="SLA preset name or YAML")]
TTFTBound = Annotated[float | None, typer.Option(help="TTFT bound, ms (overrides the SLA's)")]
TPOTBound = Annotated[float | None, typer.Option(help="TPOT bound, ms (overrides the SLA's)")]
SpaceName = Annotated[str, typer.Option(help="Search space name or YAML")]
InputTokens = Annotated[int, _ISL]
MaybeInputTokens = Annotated[int | None, _ISL]
OutputTokens = Annotated[int, _OSL]
MaybeOutputTokens = Annotated[int | None, _OSL]
Concurrency = Annotated[
    int | None, typer.Option(min=1, max=MAX_USERS, help=f"Closed-loop users, 1..{MAX_USERS}")
]
Rate = Annotated[
    float | None,
    typer.Option(
        callback=finite_positive,
        max=MAX_RATE_RPS,
        help=f"Poisson arrival rate, req/s, at most {MAX_RATE_RPS:.0f}",
    ),
]
NumRequests = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_REQUESTS,
        help=f"Measured requests, 1..{MAX_REQUESTS} (default: sized from the load)",
    ),
]
LengthsFile = Annotated[
    str | None, typer.Option("--lengths", help="CSV/JSONL of (input, output) token lengths")
]
PrefixCacheHit = Annotated[float, _PREFIX]
MaybePrefixCacheHit = Annotated[float | None, _PREFIX]
AcceptanceRate = Annotated[
    float | None, typer.Option("--acceptance", help="Per-token acceptance of draft proposals")
]
BackendName = Annotated[str, typer.Option(help="sim predicts; torch and vllm measure")]
ModelPath = Annotated[str | None, typer.Option(help="Weights folder for torch/vllm")]
CompileStep = Annotated[
    bool, typer.Option("--compile", help="torch backend: torch.compile the engine step")
]
JsonObject = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
OutDir = Annotated[Path, typer.Option(help="Parent folder of run folders")]
RunDir = Annotated[Path | None, typer.Option(help="Exact run folder to write")]
StudyName = Annotated[str, typer.Option(help="Study name in the Optuna storage")]

# tune only: options that pick its mode or bound its budget.
FixedLoadUsers = Annotated[
    int | None,
    typer.Option(min=1, max=MAX_USERS, help=f"Closed-loop users (1..{MAX_USERS}): fixed-load mode"),
]
FixedLoadRate = Annotated[
    float | None,
    typer.Option(
        callback=finite_positive,
        max=MAX_RATE_RPS,
        help=f"Poisson rate, req/s (at most {MAX_RATE_RPS:.0f}): fixed-load mode",
    ),
]
TensorParallelGPUs = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_NUM_GPUS,
        help=f"GPUs available for tensor parallelism, 1..{MAX_NUM_GPUS} "
        "[default: 8; torch/vllm: the local ones]",
    ),
]
CapacityProbes = Annotated[int | None, typer.Option(min=2, max=64, help="Capacity probes/variant")]
CapacityProbeSeconds = Annotated[
    float | None,
    typer.Option(
        min=1, max=MAX_SECONDS, help=f"Capacity search seconds per variant, 1..{MAX_SECONDS:g}"
    ),
]
CapacityLoad = Annotated[
    str, typer.Option(help="Capacity mode searches: rate (open loop) | users (closed loop)")
]
WorkloadKindName = Annotated[
    str | None,
    typer.Option(
        "--workload-kind",
        help="Prompt kind: chat | code | other (picks the shipped acceptance curve) "
        "[default: the SLA preset's]",
    ),
]
ClientProtocolName = Annotated[
    str | None,
    typer.Option(
        "--protocol",
        help="How the load starts and is counted: steady (users staggered, warm-up excluded) | "
        "vllm-bench | aiperf | guidellm (every user starts at once and every request counts, "
        "as those clients report) [default: steady]",
    ),
]
NgramAcceptanceRate = Annotated[
    float | None, typer.Option(help="Per-token acceptance of n-gram (prompt lookup) drafts")
]
TrialBudget = Annotated[
    int | None, typer.Option(min=1, max=MAX_TRIALS, help="Finished trials to reach")
]
TimeBudget = Annotated[
    float | None,
    typer.Option(
        callback=finite_positive,
        max=MAX_SECONDS,
        help=f"Stop after this many seconds, at most {MAX_SECONDS:g}",
    ),
]
Seed = Annotated[
    int,
    typer.Option(
        min=0, max=MAX_SEED, help=f"Seed of the sampler, prompts and arrivals, 0..{MAX_SEED}"
    ),
]
# Local worker processes: each is a whole Python process with its own backend, so more than a
# few dozen only thrash the machine (1000 forked 999 workers on 2 cores).
MAX_JOBS = 64
Jobs = Annotated[
    int,
    typer.Option(min=1, max=MAX_JOBS, help=f"Local worker processes on this study, 1..{MAX_JOBS}"),
]
