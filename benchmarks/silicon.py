"""Score the sim backend on benchmarks/data/silicon_public.csv (closed-loop mean TTFT and TPOT).

Each row is one engine instance serving `batch_size` concurrent closed-loop users with fixed
input/output lengths; the measured values are mean TTFT and mean TPOT. The simulator replays the
same measurement protocol, not the tuner's steady-state load: AIConfigurator benchmarks an agg
deployment with AIPerf (github.com/ai-dynamo/aiconfigurator,
src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2 and
generator/sflow.py): `aiperf profile --concurrency C --num-requests C x 20
--warmup-request-count 2C --isl I --isl-stddev 0 --osl O --osl-stddev 0` with `ignore_eos`.
AIPerf runs the warm-up phase and waits for all its credits to return before the profiling
phase starts (github.com/ai-dynamo/aiperf, aiperf/timing/credit_issuing_strategy.py,
`_execute_phases`), and its concurrency mode issues credits with no delay up to C in flight
(`CONCURRENCY_BURST`, aiperf/timing/request_rate_strategy.py). So the measured phase starts
from an idle engine with all C users sending at once, lengths are exact, and the mean covers
the C x 20 measured requests: `ramp_s=0`, `length_spread=0`, no warm-up in the replay (the
drained warm-up leaves no queue behind), `num_requests = 20 C`.

Engine defaults every row shares: an 8192-token step budget with chunked prefill and
`max_num_seqs` large enough not to bind. One scheduling property differs by engine and is
documented by the engine itself: SGLang runs a pending prefill batch before any decode step
and does not mix decodes into it (`enable_mixed_chunk` defaults to False in
python/sglang/srt/server_args.py; `Scheduler.get_next_batch_to_run` in
python/sglang/srt/managers/scheduler.py returns a new prefill batch whenever one is ready),
while vLLM and TensorRT-LLM put decodes in the same step as prefill chunks. No row or source
gets a special case. `--engine-setup generator` instead replays the engine limits
AIConfigurator's generator writes for an agg deployment (`generator_setup`), to test whether the
rows were measured with those. Imported by `accuracy.py`; runnable alone:

    python benchmarks/silicon.py [--csv PATH] [--requests-per-user N] [--engine-setup S] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from tuner import catalog
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from tuner.perf.predict import predict_metrics
from tuner.specs import SLA, Context, EngineConfig, KVDtype, Quantization, Workload

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "silicon_public.csv"

MODELS = {
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
}
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200"}
# gemm_quant_mode -> weight quantization. fp8_block (128x128 block scales) runs the same FP8
# tensor-core math as per-tensor fp8; nvfp4 has no model here and is skipped with that reason.
GEMM_MODES = {"": Quantization.bf16, "fp8": Quantization.fp8, "fp8_block": Quantization.fp8}
# The `precision` column names the KV-cache dtype of the FP8/FP4 rows ("" = 16-bit).
KV_PRECISIONS = {"": KVDtype.auto, "fp8": KVDtype.fp8, "fp4": KVDtype.fp8}
# Shared engine defaults: the step budget vLLM (>= 70 GiB GPUs), SGLang and TensorRT-LLM use
# for online serving, and a sequence limit above every row's concurrency.
MAX_BATCHED_TOKENS = 8192
MIN_MAX_NUM_SEQS = 1024
# AIConfigurator's benchmark sends `--num-requests concurrency x 20` (BENCH_MULTI_ROUND).
MEASURED_ROUNDS = 20
# Engines whose scheduler runs waiting prefills first, in steps without decodes (see above).
PREFILL_FIRST_ENGINES = frozenset({"sglang"})
NO_SLA = SLA(name="none")


@dataclass(frozen=True)
class EngineSetup:
    """The scheduler limits one row's engine runs with."""

    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    mix_prefill_decode: bool


def shared_setup(backend: str, isl: int, users: int) -> EngineSetup:
    """The shared defaults above; only SGLang's prefill-first scheduling differs."""
    mixed = backend not in PREFILL_FIRST_ENGINES
    return EngineSetup(MAX_BATCHED_TOKENS, max(MIN_MAX_NUM_SEQS, users), True, mixed)


def generator_setup(backend: str, isl: int, users: int) -> EngineSetup:
    """AIConfigurator's generated agg config (github.com/ai-dynamo/aiconfigurator, 2026-04).

    src/aiconfigurator/generator/rule_plugin/{vllm,sglang,trtllm}.rule: vLLM and SGLang
    `max_batch_size = 512` below 512 (else twice the given), vLLM `max_num_tokens =
    max_batch_size + isl + 1500`, SGLang `max_prefill_tokens = isl + 1500` with
    `enable_mixed_chunk = true`, TensorRT-LLM `max_num_tokens = max_batch_size + isl + 500`
    rounded up to a 32-token block with `enable_chunked_prefill` false (its templates' default).
    """
    big = 512 if users < 512 else 2 * users
    if backend == "trtllm":
        return EngineSetup(-(-(users + isl + 500) // 32) * 32, users, False, True)
    if backend == "sglang":
        return EngineSetup(isl + 1500, big, True, True)
    return EngineSetup(big + isl + 1500, big, True, True)


ENGINE_SETUPS = {"shared": shared_setup, "generator": generator_setup}


@dataclass
class SiliconResult:
    """One silicon row: measured and predicted mean TTFT/TPOT, or why it was skipped."""

    row_id: str
    engine: str
    measured_ttft_ms: float
    measured_tpot_ms: float
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    skipped: str | None = None

    def errors_pct(self) -> tuple[float, float]:
        """Signed percent errors of TTFT and TPOT."""
        assert self.predicted_ttft_ms is not None and self.predicted_tpot_ms is not None
        ttft = 100.0 * (self.predicted_ttft_ms - self.measured_ttft_ms) / self.measured_ttft_ms
        tpot = 100.0 * (self.predicted_tpot_ms - self.measured_tpot_ms) / self.measured_tpot_ms
        return ttft, tpot


def row_case(
    row: dict[str, str], setup: EngineSetup | None = None
) -> tuple[str, str, EngineConfig, Workload]:
    """Model, GPU, engine config and closed-loop workload of one row (LookupError if unmodelled)."""
    model = MODELS.get(row["model_path"])
    gpu = SYSTEMS.get(row["system"])
    quant = GEMM_MODES.get(row["gemm_quant_mode"])
    if model is None or gpu is None:
        raise LookupError(f"no catalog entry for {row['model_path']} on {row['system']}")
    if quant is None:
        raise LookupError(f"gemm_quant_mode {row['gemm_quant_mode']!r} is not modelled")
    if int(float(row["pp_size"])) != 1:
        raise LookupError("pipeline parallelism is not modelled")
    users = int(float(row["batch_size"]))
    setup = setup or shared_setup(row["backend"], int(row["isl"]), users)
    config = EngineConfig(
        quantization=quant,
        kv_dtype=KV_PRECISIONS.get(row["precision"], KVDtype.auto),
        tensor_parallel_size=int(float(row["tp_size"])),
        max_num_batched_tokens=setup.max_num_batched_tokens,
        max_num_seqs=setup.max_num_seqs,
        enable_chunked_prefill=setup.chunked_prefill,
        enable_prefix_caching=False,
    )
    # AIPerf's protocol: burst start from an idle engine, exact lengths, drained warm-up.
    workload = Workload(
        input_tokens=int(row["isl"]),
        output_tokens=int(row["osl"]),
        concurrency=users,
        num_requests=MEASURED_ROUNDS * users,
        warmup_requests=0,
        ramp_s=0.0,
    )
    return model, gpu, config, workload


def predict_silicon_row(
    row: dict[str, str],
    eff: Efficiency = DEFAULT_EFFICIENCY,
    requests_per_user: int | None = None,
    engine_setup: str = "shared",
) -> SiliconResult:
    """Predict one row's mean TTFT and TPOT (`requests_per_user` overrides the request count)."""
    res = SiliconResult(
        row["id"], row["backend"], float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    )
    setup = ENGINE_SETUPS[engine_setup](
        row["backend"], int(row["isl"]), int(float(row["batch_size"]))
    )
    try:
        model_name, gpu_name, config, workload = row_case(row, setup)
    except LookupError as exc:
        res.skipped = str(exc)
        return res
    if requests_per_user is not None:
        n = requests_per_user * workload.users
        workload = workload.model_copy(update={"num_requests": n})
    ctx = Context(
        model=catalog.load_model(model_name),
        gpu=catalog.load_gpu(gpu_name),
        sla=NO_SLA,
        workload=workload,
        num_gpus=config.tensor_parallel_size,
    )
    metrics = predict_metrics(config, ctx, eff, mix_prefill_decode=setup.mix_prefill_decode)
    if not metrics.feasible:
        res.skipped = f"predicted infeasible: {metrics.reason}"
        return res
    res.predicted_ttft_ms, res.predicted_tpot_ms = metrics.ttft_ms.mean, metrics.tpot_ms.mean
    return res


def load_rows(path: Path) -> list[dict[str, str]]:
    """Rows of the silicon CSV."""
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def summarize_errors(results: list[SiliconResult]) -> dict[str, dict[str, float]]:
    """Median absolute % error of TTFT and TPOT per engine and over all scored rows."""
    groups: dict[str, list[SiliconResult]] = {}
    for r in results:
        if r.skipped is None:
            groups.setdefault(r.engine, []).append(r)
            groups.setdefault("all", []).append(r)
    out = {}
    for name, rows in sorted(groups.items()):
        errs = [r.errors_pct() for r in rows]
        out[name] = {
            "rows": len(rows),
            "ttft_median_abs_pct": statistics.median(abs(e[0]) for e in errs),
            "tpot_median_abs_pct": statistics.median(abs(e[1]) for e in errs),
            "ttft_median_signed_pct": statistics.median(e[0] for e in errs),
            "tpot_median_signed_pct": statistics.median(e[1] for e in errs),
        }
    return out


def score(
    path: Path = DEFAULT_CSV, requests_per_user: int | None = None, engine_setup: str = "shared"
) -> tuple[list[SiliconResult], dict[str, dict[str, float]]]:
    """Predict every row of `path`; the per-row results and the per-engine summary."""
    results = [
        predict_silicon_row(r, requests_per_user=requests_per_user, engine_setup=engine_setup)
        for r in load_rows(path)
    ]
    return results, summarize_errors(results)


def print_summary(results: list[SiliconResult], summary: dict[str, dict[str, float]]) -> None:
    """Skipped-row reasons and the per-engine median errors, one line each."""
    skipped: dict[str, int] = {}
    for r in results:
        if r.skipped:
            skipped[r.skipped] = skipped.get(r.skipped, 0) + 1
    print(f"\nsilicon rows (closed-loop mean TTFT/TPOT), {len(results)} rows:")
    for reason, count in sorted(skipped.items()):
        print(f"  skipped {count}: {reason}")
    print(f"  {'engine':8} {'rows':>5} {'TTFT |err|':>11} {'TPOT |err|':>11} {'TTFT bias':>10}")
    for name, s in summary.items():
        print(
            f"  {name:8} {s['rows']:5d} {s['ttft_median_abs_pct']:10.1f}% "
            f"{s['tpot_median_abs_pct']:10.1f}% {s['ttft_median_signed_pct']:+9.1f}%"
        )


def main(argv: list[str] | None = None) -> int:
    """Score the silicon rows and print (or --json) the per-engine summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--requests-per-user", type=int, default=None)
    ap.add_argument("--engine-setup", choices=sorted(ENGINE_SETUPS), default="shared")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results, summary = score(args.csv, args.requests_per_user, args.engine_setup)
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(results, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
