"""Predict benchmarks/data/public.csv and silicon_public.csv with the sim backend; report errors.

Prints, per row, the measured and predicted value with the signed percent error; the rows the
model cannot represent, each with the reason; the median absolute percent error per metric; and
for the closed-loop silicon rows (`silicon.py`) the median absolute error of mean TTFT and TPOT
per engine and over all of them.
Only the shared constants of tuner/perf/efficiency.py are tuned against these rows: nothing
here depends on a row's id or source. A public row measured on TensorRT-LLM, SGLang or vLLM is
replayed with that `engine` knob (its scheduler and CUDA-graph record, tuner.perf.engines);
rows from other engines (and TensorRT-LLM's TensorRT-engine rows) keep the default engine's.
Each metric is also summarised per engine.

    python benchmarks/accuracy.py [--csv PATH] [--silicon-csv PATH] [--moe-csv PATH] [--json]
                                  [--write-bands [PATH]] [--write-docs PATH]

It also prints an FP4 block (the nvfp4 silicon rows) and a MoE block (moe_public.csv).

`--write-bands` also writes the per-quantity validation errors that `tuner.perf.bands` uses as
the error band of an uncalibrated prediction (default: tuner/data/validation_bands.json, shipped
in the package). Which rows back which quantity is `BAND_BASIS` below. `--write-docs PATH`
writes the summary blocks as the markdown page docs/accuracy.md (`accuracy_docs.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import accuracy_docs
import disagg_accuracy
import numpy as np
import silicon

from tuner import catalog
from tuner.perf.bands import QuantityError, ValidationBands
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from tuner.perf.memory import plan_memory
from tuner.perf.predict import predict_metrics
from tuner.specs import (
    SLA,
    Context,
    Engine,
    EngineConfig,
    KVDtype,
    Metrics,
    Quantization,
    Workload,
)

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "public.csv"
# Public MoE serving rows (DeepSeek-V3/R1, Qwen3-235B, gpt-oss), replayed like the silicon rows.
MOE_CSV = Path(__file__).resolve().parent / "data" / "moe_public.csv"
DEFAULT_BANDS = Path(__file__).resolve().parents[1] / "tuner" / "data" / "validation_bands.json"
BANDS_COMMAND = "python benchmarks/accuracy.py --write-bands"
# Which validation rows back each quantity's band. The error is |measured/predicted - 1|: how far
# the measurement lies from the prediction, relative to the prediction, which is what a band
# around a predicted value states (|predicted/measured - 1| would count a 3x over-prediction as
# +200%, when the measurement lies 67% below the prediction).
BAND_BASIS = {
    "ttft": "silicon closed-loop mean TTFT rows and public ttft_ms rows",
    "tpot": "silicon mean TPOT rows, public tpot_ms/itl_ms rows, and public single-stream decode "
    "rows as time per token (1 / decode tok/s)",
    "e2e": "silicon rows as mean E2E = TTFT + (osl - 1) x TPOT, and public e2e_ms rows",
    "throughput": "public output_tok_s_per_gpu rows (offline throughput per GPU)",
}
_PUBLIC_QUANTITY = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "tpot", "e2e_ms": "e2e",
                    "output_tok_s_per_gpu": "throughput"}  # fmt: skip

# Validation GPU names -> catalog profiles. Power caps are not modelled (the datasheet profile is
# used and the row keeps its cap in the printout); an unstated A100 80GB variant maps to SXM.
GPU_NAMES = {
    "H200-SXM-141GB": "h200-sxm",
    "H100-SXM-80GB": "h100-sxm",
    "H100-PCIe-80GB": "h100-pcie",
    "A100-SXM4-80GB": "a100-80gb-sxm",
    "A100-80GB": "a100-80gb-sxm",
    "RTX-4090-24GB": "rtx-4090",
}
# Validation weight dtypes -> our quantizations (gpt-fast's int4 group 32 is modelled as g128).
WEIGHT_DTYPES = {
    "fp16": Quantization.fp16,
    "f16": Quantization.fp16,
    "bf16": Quantization.bf16,
    "fp8": Quantization.fp8,
    "int8_wo": Quantization.int8_wo,
    "int4_wo_g32": Quantization.int4_gptq,
    "awq_int4_g128": Quantization.int4_awq,
}
KV_DTYPES = {"fp8": KVDtype.fp8, "int8": KVDtype.int8}  # anything else: 16-bit (auto)
# An unstated KV dtype follows the checkpoint: FP8 checkpoints (ModelOpt `nvidia/*-FP8`, which
# TensorRT-LLM's docs say also set the KV cache to FP8) store FP8 KV; others 16-bit.
UNSTATED_KV_BY_WEIGHT = {Quantization.fp8: KVDtype.fp8}
PREDICTED_METRICS = {
    "output_tok_s_per_gpu",
    "decode_tok_s_single_stream",
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
}
# Lengths a row leaves blank: llama.cpp eval tables state neither; gpt-fast generates 200 tokens.
DEFAULT_ISL = 128
DEFAULT_OSL = 128
# Offline (all requests queued) rows: the engine picks the batch, limited by KV memory. We run the
# variant a tuner would pick: max_num_seqs = the full-length sequences that fit in the KV cache
# (capped at a generous 2048), so no sequence is admitted only to be preempted later, and the
# 8192-token step budget that trtllm-bench and vLLM use by default.
OFFLINE_MAX_NUM_SEQS = 2048
OFFLINE_MAX_BATCHED_TOKENS = 8192
# trtllm-bench gives the KV cache 90% of the memory left after weights and activations.
OFFLINE_GPU_MEMORY_UTILIZATION = 0.95
OFFLINE_MIN_REQUESTS = 1000
OFFLINE_MAX_REQUESTS = 8192
OFFLINE_WAVES = 4  # requests per KV-limited batch slot, so ramp-up and drain stay small
STATIC_BATCH_WAVES = 4
ONLINE_REQUESTS = 500
SINGLE_STREAM_REQUESTS = 3
NO_SLA = SLA(name="none")


@dataclass
class RowResult:
    """One validation row: its prediction or why it was skipped."""

    row_id: str
    model: str
    gpu: str
    metric: str
    measured: float
    predicted: float | None = None
    skipped: str | None = None
    engine: str = ""  # the engine knob the row was replayed with

    @property
    def error_pct(self) -> float:
        """Signed percent error of the prediction."""
        assert self.predicted is not None
        return 100.0 * (self.predicted - self.measured) / self.measured


def _model_name(name: str) -> str:
    base = name.lower().removesuffix("-instruct")
    names = catalog.list_names("models")
    if base in names:
        return base
    raise LookupError(f"model {name!r} has no catalog card")


def _gpu_name(name: str) -> str:
    key = name.split(" (")[0].strip()
    if key in GPU_NAMES:
        return GPU_NAMES[key]
    raise LookupError(f"GPU {name!r} has no catalog profile")


def _int(text: str, default: int) -> int:
    text = text.strip()
    return int(float(text)) if text and text.replace(".", "", 1).isdigit() else default


# The engine knob of a row's `engine` column (its leading name); other engines keep the default.
# Only TensorRT-LLM's PyTorch backend is the `trtllm` knob: its older TensorRT-engine rows (v0.x)
# run one compiled engine with no per-kernel host launches, closer to the default record.
ROW_ENGINES = {
    "TensorRT-LLM (PyTorch backend": Engine.trtllm,
    "SGLang": Engine.sglang,
    "vLLM": Engine.vllm,
}


def row_engine(row: dict[str, str]) -> Engine | None:
    """The engine knob a public row was measured on, or None when the tuner does not model it."""
    for prefix, engine in ROW_ENGINES.items():
        if row["engine"].strip().startswith(prefix):
            return engine
    return None


def _config_and_workload(row: dict[str, str], ctx_base: Context) -> tuple[EngineConfig, Workload]:
    weight = row["weight_dtype"].strip()
    if weight not in WEIGHT_DTYPES:
        raise LookupError(f"weight dtype {weight!r} is not modelled")
    quant = WEIGHT_DTYPES[weight]
    kv_text = row["kv_dtype"].strip().split(" ")[0]
    if kv_text == "unstated":
        kv = UNSTATED_KV_BY_WEIGHT.get(quant, KVDtype.auto)
    else:
        kv = KV_DTYPES.get(kv_text, KVDtype.auto)
    isl_text, osl_text = row["isl"].strip(), row["osl"].strip()
    if (isl_text and not isl_text.isdigit()) or (osl_text and not osl_text.isdigit()):
        raise LookupError(f"lengths {isl_text!r}/{osl_text!r} are a benchmark suite, not numbers")
    isl, osl = _int(isl_text, DEFAULT_ISL), _int(osl_text, DEFAULT_OSL)
    tp = _int(row["tp"], 1)
    batch = row["concurrency_or_batch"].strip()
    rate = row["request_rate"].strip()
    config = EngineConfig(quantization=quant, kv_dtype=kv, tensor_parallel_size=tp)
    if (engine := row_engine(row)) is not None:
        config = config.model_copy(update={"engine": engine})
    if batch == "offline_max" or rate == "inf":
        config = config.model_copy(
            update={
                "max_num_seqs": OFFLINE_MAX_NUM_SEQS,
                "max_num_batched_tokens": OFFLINE_MAX_BATCHED_TOKENS,
                "gpu_memory_utilization": OFFLINE_GPU_MEMORY_UTILIZATION,
            }
        )
        probe = Workload(input_tokens=isl, output_tokens=osl)
        plan = plan_memory(ctx_base.model, ctx_base.gpu, config, probe)
        slots = max(1, plan.max_concurrent_seqs)
        config = config.model_copy(update={"max_num_seqs": slots})
        n = min(OFFLINE_MAX_REQUESTS, max(OFFLINE_MIN_REQUESTS, OFFLINE_WAVES * slots))
        # Offline: every request queued at t = 0 (no staggered start, no warm-up round).
        offline = Workload(
            input_tokens=isl,
            output_tokens=osl,
            concurrency=n,
            num_requests=n,
            ramp_s=0.0,
            warmup_requests=0,
        )
        return config, offline
    if rate:
        return config, Workload(
            input_tokens=isl, output_tokens=osl, rate_rps=float(rate), num_requests=ONLINE_REQUESTS
        )
    users = _int(batch, 1)
    n = SINGLE_STREAM_REQUESTS if users == 1 else STATIC_BATCH_WAVES * users
    return config, Workload(input_tokens=isl, output_tokens=osl, concurrency=users, num_requests=n)


def _value(metric: str, m: Metrics) -> float:
    if metric == "output_tok_s_per_gpu":
        return m.output_tokens_per_s_per_gpu
    if metric == "decode_tok_s_single_stream":
        return 1000.0 / m.tpot_ms.mean
    # Online tables report means.
    return {"ttft_ms": m.ttft_ms, "itl_ms": m.itl_ms, "tpot_ms": m.tpot_ms, "e2e_ms": m.e2e_ms}[
        metric
    ].mean


def predict_row(row: dict[str, str], eff: Efficiency = DEFAULT_EFFICIENCY) -> RowResult:
    """Predict one CSV row (or say why it cannot be represented)."""
    res = RowResult(row["id"], row["model"], row["gpu"], row["metric"], float(row["value"]))
    if res.metric not in PREDICTED_METRICS:
        res.skipped = f"metric {res.metric!r} is an input of the model (acceptance), not an output"
        return res
    try:
        model = catalog.load_model(_model_name(row["model"]))
        gpu = catalog.load_gpu(_gpu_name(row["gpu"]))
        ctx = Context(model=model, gpu=gpu, sla=NO_SLA, workload=Workload())
        config, workload = _config_and_workload(row, ctx)
    except LookupError as exc:
        res.skipped = str(exc)
        return res
    ctx = ctx.model_copy(update={"workload": workload, "num_gpus": config.tensor_parallel_size})
    res.engine = config.engine.value
    metrics = predict_metrics(config, ctx, eff)
    if not metrics.feasible:
        res.skipped = f"predicted infeasible: {metrics.reason}"
        return res
    res.predicted = _value(res.metric, metrics)
    return res


def median_abs_errors(results: list[RowResult]) -> dict[str, tuple[float, int]]:
    """Median absolute percent error and row count per metric, then per metric and engine
    (keyed `metric [engine]`) where a metric was replayed on more than one engine."""
    by_metric: dict[str, list[float]] = {}
    by_engine: dict[str, dict[str, list[float]]] = {}
    for r in results:
        if r.predicted is not None:
            by_metric.setdefault(r.metric, []).append(abs(r.error_pct))
            by_engine.setdefault(r.metric, {}).setdefault(r.engine, []).append(abs(r.error_pct))
    out = {k: (statistics.median(v), len(v)) for k, v in sorted(by_metric.items())}
    for metric, engines in sorted(by_engine.items()):
        if len(engines) > 1:
            for engine, v in sorted(engines.items()):
                out[f"{metric} [{engine}]"] = (statistics.median(v), len(v))
    return out


def band_errors(
    results: list[RowResult],
    silicon_results: list[silicon.SiliconResult],
    osl_by_id: dict[str, int],
) -> dict[str, list[float]]:
    """Per quantity, the |measured/predicted - 1| of every scored row that backs it."""
    errs: dict[str, list[float]] = {q: [] for q in BAND_BASIS}
    for r in results:
        if r.predicted is None:
            continue
        if r.metric == "decode_tok_s_single_stream":  # time per token is 1 / rate
            errs["tpot"].append(abs(r.predicted / r.measured - 1))
        elif r.metric in _PUBLIC_QUANTITY:
            errs[_PUBLIC_QUANTITY[r.metric]].append(abs(r.measured / r.predicted - 1))
    for s in silicon_results:
        if s.skipped is not None:
            continue
        assert s.predicted_ttft_ms is not None and s.predicted_tpot_ms is not None
        errs["ttft"].append(abs(s.measured_ttft_ms / s.predicted_ttft_ms - 1))
        errs["tpot"].append(abs(s.measured_tpot_ms / s.predicted_tpot_ms - 1))
        steps = osl_by_id[s.row_id] - 1
        e2e_p = s.predicted_ttft_ms + steps * s.predicted_tpot_ms
        e2e_m = s.measured_ttft_ms + steps * s.measured_tpot_ms
        errs["e2e"].append(abs(e2e_m / e2e_p - 1))
    return errs


def validation_bands(errs: dict[str, list[float]], today: str) -> ValidationBands:
    """The shipped file's content: median and p90 error per quantity, with the row counts."""
    quantities = {}
    for q, values in errs.items():
        if not values:
            raise SystemExit(f"error: no scored validation row backs the {q} band")
        quantities[q] = QuantityError(
            median_abs_rel_error=round(float(np.median(values)), 4),
            p90_abs_rel_error=round(float(np.percentile(values, 90)), 4),
            rows=len(values),
            basis=BAND_BASIS[q],
        )
    return ValidationBands(command=BANDS_COMMAND, generated_at=today, quantities=quantities)


def write_bands(
    path: Path,
    results: list[RowResult],
    silicon_results: list[silicon.SiliconResult],
    silicon_csv: Path,
) -> ValidationBands:
    """Compute the validation bands and write them to `path` as JSON."""
    osl = {r["id"]: int(r["osl"]) for r in silicon.load_rows(silicon_csv)}
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    bands = validation_bands(band_errors(results, silicon_results, osl), today)
    path.write_text(bands.model_dump_json(indent=2) + "\n")
    return bands


def write_docs_page(
    path: Path,
    public: dict[str, tuple[float, int]],
    silicon_results: list[silicon.SiliconResult],
    silicon_summary: dict[str, dict[str, float]],
    fp4_ids: set[str],
    moe_results: list[silicon.SiliconResult],
    by_protocol: list[silicon.SiliconResult],
    disagg: tuple[list[dict[str, str]], list[silicon.SiliconResult]] | None = None,
) -> None:
    """Write the printed summary blocks as the markdown page docs/accuracy.md."""
    fp4 = [r for r in silicon_results if r.row_id in fp4_ids]
    blocks = [
        accuracy_docs.Block(
            "Closed-loop silicon rows (`benchmarks/data/silicon_public.csv`)",
            accuracy_docs.SILICON_NOTE,
            silicon_results,
            silicon_summary,
        ),
        accuracy_docs.Block(
            "FP4 block", accuracy_docs.FP4_NOTE, fp4, silicon.summarize_errors(fp4)
        ),
        accuracy_docs.Block(
            "MoE block (`benchmarks/data/moe_public.csv`, distinct rows)",
            accuracy_docs.MOE_NOTE,
            moe_results,
            silicon.summarize_errors(moe_results),
        ),
        accuracy_docs.Block(
            "MoE block by client protocol",
            accuracy_docs.PROTOCOL_NOTE,
            by_protocol,
            silicon.summarize_errors(by_protocol),
            group="protocol",
        ),
    ]
    if disagg is not None:
        blocks += _disagg_blocks(*disagg)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    shipped = ValidationBands.model_validate_json(DEFAULT_BANDS.read_text())
    accuracy_docs.write_docs(path, public, blocks, shipped, today)


def _disagg_blocks(
    rows: list[dict[str, str]], results: list[silicon.SiliconResult]
) -> list[accuracy_docs.Block]:
    """The disaggregated rows per engine and per GPU, with the unscored rows' reasons."""
    report = disagg_accuracy.report(rows, results)
    skipped = "; ".join(f"{n} {why}" for why, n in report["not_scored"].items())
    gpu_of = {r["id"]: r["system"] for r in rows}
    by_gpu = [dataclasses.replace(r, engine=gpu_of[r.row_id]) for r in results]
    note = accuracy_docs.DISAGG_NOTE.format(skipped=skipped or "none")
    return [
        accuracy_docs.Block(
            "Disaggregated block (`benchmarks/data/disagg_public.csv`, distinct rows)",
            note,
            results,
            report["by_engine"],
        ),
        accuracy_docs.Block(
            "Disaggregated block by GPU",
            "The same rows per GPU.",
            by_gpu,
            report["by_gpu"],
            group="gpu",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """Print the per-row table, skipped rows and per-metric median absolute error."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--silicon-csv", type=Path, default=silicon.DEFAULT_CSV)
    ap.add_argument("--moe-csv", type=Path, default=MOE_CSV)
    ap.add_argument("--json", action="store_true", help="print a JSON summary instead")
    ap.add_argument(
        "--write-bands",
        type=Path,
        nargs="?",
        const=DEFAULT_BANDS,
        default=None,
        metavar="PATH",
        help=f"write the validation bands (default {DEFAULT_BANDS})",
    )
    ap.add_argument("--write-docs", type=Path, metavar="PATH", help="write docs/accuracy.md")
    ap.add_argument(
        "--disagg-jobs",
        type=int,
        default=0,
        metavar="N",
        help="also replay the disaggregated rows on N processes (about 11 min with 2 here)",
    )
    args = ap.parse_args(argv)
    disagg = (
        disagg_accuracy.score(jobs=min(args.disagg_jobs, disagg_accuracy.MAX_JOBS))
        if args.disagg_jobs > 0
        else None
    )
    results = [predict_row(r) for r in silicon.load_rows(args.csv)]
    summary = median_abs_errors(results)
    silicon_results, silicon_summary = silicon.score(args.silicon_csv)
    silicon_rows = silicon.load_rows(args.silicon_csv)
    fp4_ids = {r["id"] for r in silicon_rows if "fp4" in r["gemm_quant_mode"]}
    fp4_summary = silicon.summarize_errors([r for r in silicon_results if r.row_id in fp4_ids])
    moe_rows = [r for r in silicon.load_rows(args.moe_csv) if not r.get("duplicate_of")]
    moe_results = [silicon.predict_silicon_row(r) for r in moe_rows]
    moe_summary = silicon.summarize_errors(moe_results)
    # The same rows grouped by client protocol: cold (no warm-up) InferenceMAX runs include
    # first-shape JIT/graph capture in their mean TTFT, which steady-state serving never pays.
    by_protocol = [
        dataclasses.replace(res, engine=row.get("protocol") or "unknown")
        for row, res in zip(moe_rows, moe_results, strict=True)
    ]
    moe_protocol_summary = silicon.summarize_errors(by_protocol)
    if args.write_bands is not None:
        bands = write_bands(args.write_bands, results, silicon_results, args.silicon_csv)
        for q, e in bands.quantities.items():
            print(
                f"band {q:10} p90 {e.p90_abs_rel_error:.1%}, median "
                f"{e.median_abs_rel_error:.1%} over {e.rows} rows",
                file=sys.stderr,
            )
    if args.write_docs is not None:
        docs = (silicon_results, silicon_summary, fp4_ids, moe_results, by_protocol)
        write_docs_page(args.write_docs, summary, *docs, disagg=disagg)
    if args.json:
        doc: dict[str, object] = {
            k: {"median_abs_error_pct": e, "rows": n} for k, (e, n) in summary.items()
        }
        doc["silicon"] = silicon_summary
        doc["fp4"] = fp4_summary
        doc["moe"] = moe_summary
        doc["moe_by_protocol"] = moe_protocol_summary
        if disagg is not None:
            doc["disagg"] = disagg_accuracy.report(*disagg)
        print(json.dumps(doc))
        return 0
    head = ("id", "model", "gpu", "metric", "measured", "predicted", "err%")
    print("{:6} {:24} {:28} {:27} {:>10} {:>10} {:>7}".format(*head))
    for r in results:
        if r.predicted is not None:
            print(
                f"{r.row_id:6} {r.model[:24]:24} {r.gpu[:28]:28} {r.metric:27} "
                f"{r.measured:10.2f} {r.predicted:10.2f} {r.error_pct:+7.1f}"
            )
    print("\nskipped:")
    for r in results:
        if r.skipped:
            print(f"  {r.row_id} {r.model} {r.metric}: {r.skipped}")
    print("\nmedian absolute error per metric:")
    for metric, (err, n) in summary.items():
        flag = "" if n >= 5 else "  (fewer than 5 rows)"
        print(f"  {metric:27} {err:6.1f}%  over {n} rows{flag}")
    silicon.print_summary(silicon_results, silicon_summary)
    print("\nFP4 block: the nvfp4 rows of the silicon CSV")
    silicon.print_summary([r for r in silicon_results if r.row_id in fp4_ids], fp4_summary)
    print(f"\nMoE block: distinct rows of {args.moe_csv.name}")
    silicon.print_summary(moe_results, moe_summary)
    print("\nMoE block by client protocol (same rows; 'engine' column = protocol)")
    silicon.print_summary(by_protocol, moe_protocol_summary)
    if disagg is not None:
        print("\nDisaggregated block: distinct rows of disagg_public.csv")
        disagg_accuracy.print_report(disagg_accuracy.report(*disagg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
