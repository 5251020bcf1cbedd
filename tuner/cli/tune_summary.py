"""The capacity-mode terminal summary of `tuner tune`: readable at 80 columns and when piped."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from tuner.cli.app import console
from tuner.perf.capacity import LoadPoint
from tuner.run.capacity_out import engine_picks, format_load, load_unit
from tuner.run.tune import TuneOutcome, require_recommendation
from tuner.specs import SLA, EngineConfig

__all__ = ["MAX_FRONT_ROWS", "print_capacity_summary", "short_config"]

# Rows of the frontier printed; the full table is pareto.csv and the report.
MAX_FRONT_ROWS = 10


def short_config(c: EngineConfig) -> str:
    """A variant in a few words: weights/KV, TP, batch limits, speculation, prefix caching."""
    spec = f" {c.draft_model}x{c.num_speculative_tokens}" if c.num_speculative_tokens else ""
    return (f"{c.quantization.value}/{c.kv_dtype.value}kv tp{c.tensor_parallel_size} "
            f"seqs{c.max_num_seqs} tok{c.max_num_batched_tokens}{spec}"
            f"{'' if c.enable_prefix_caching else ' no-prefix'}")  # fmt: skip


def _bounds(sla: SLA) -> str:
    parts = []
    if sla.ttft_ms is not None:
        parts.append(f"TTFT P{sla.percentile} <= {sla.ttft_ms:g} ms")
    if sla.tpot_ms is not None:
        parts.append(f"TPOT P{sla.percentile} <= {sla.tpot_ms:g} ms")
    return ", ".join(parts) or "no latency bound"


def _at(p: LoadPoint, mode: str, pct: int) -> str:
    return (
        f"{p.requests_per_s_per_gpu:,.2f} req/s and {p.output_tokens_per_s_per_gpu:,.0f} "
        f"output tok/s per GPU at {format_load(p.load, mode)} {load_unit(mode)} per replica; "
        f"TTFT P{pct} {p.ttft_ms.at(pct):,.1f} ms, TPOT P{pct} {p.tpot_ms.at(pct):,.2f} ms"
    )


def _front_table(outcome: TuneOutcome) -> Table:
    result, pct = outcome.result, outcome.spec.sla.percentile
    by_number = {r.number: r for r in outcome.records}
    shown = result.frontier[:MAX_FRONT_ROWS]
    t = Table(title=f"frontier: {len(shown)} of {len(result.frontier)} distinct outcomes")
    for col in ("trial", "variant", "load", "tok/s/GPU", f"TPOT P{pct}", f"TTFT P{pct}", "n"):
        t.add_column(col, justify="left" if col == "variant" else "right", overflow="fold")
    for q in shown:
        cfg = by_number[q.trial].config
        assert cfg is not None
        mark = " *" if q.trial == result.recommended and q.is_capacity else ""
        t.add_row(f"{q.trial}{mark}", escape(short_config(cfg)), format_load(q.load, q.mode),
                  f"{q.output_tokens_per_s_per_gpu:,.0f}", f"{q.tpot_ms:,.2f}",
                  f"{q.ttft_ms:,.1f}", str(len(q.variants)))  # fmt: skip
    return t


def print_capacity_summary(outcome: TuneOutcome) -> None:
    """Mode, recommendation with capacity and operating load, top frontier rows, file paths."""
    spec, result = outcome.spec, outcome.result
    pct = spec.sla.percentile
    how = "open-loop Poisson rate" if spec.capacity_load == "rate" else "closed-loop users"
    console.print(f"mode: capacity ({how}): each variant's highest load meeting "
                  f"{_bounds(spec.sla)}", highlight=False)  # fmt: skip
    if result.frontier:
        console.print(_front_table(outcome))
        console.print(
            "load in " + load_unit(spec.capacity_load) + " per replica; n = variants "
            "with this outcome (knobs that did not matter: pareto.csv)",
            highlight=False,
        )
    console.print(
        f"full tables: {escape(str(outcome.files.get('pareto.csv', '')))}, "
        f"{escape(str(outcome.files.get('trials.csv', '')))}",
        highlight=False,
    )
    console.print(f"report: {escape(str(outcome.files.get('report.html', '')))}", highlight=False)
    number = require_recommendation(outcome)  # exits 3 with the closest misses when none
    rec = next(r for r in outcome.records if r.number == number)
    assert rec.config is not None and rec.capacity is not None
    cap = rec.capacity
    console.print(f"[bold]recommended: trial {number}[/]: {escape(short_config(rec.config))}")
    top, op = cap.at_sla, cap.operating
    assert top is not None
    console.print(f"  capacity at the SLA: {_at(top, cap.mode, pct)}", highlight=False)
    if op is not None:
        console.print(f"  operate at ({cap.headroom:.0%} headroom): {_at(op, cap.mode, pct)}",
                      highlight=False)  # fmt: skip
    else:
        console.print("  no probed load keeps the headroom margin: run below capacity",
                      highlight=False)  # fmt: skip
    picks = engine_picks(outcome.records, result, spec)
    for key, engine, path in (("vllm", "vLLM", "vllm.sh"), ("sglang", "SGLang", "sglang.sh"),
                              ("trtllm", "TRT-LLM", "trtllm.sh")):  # fmt: skip
        file, pick = outcome.run_dir / "exports" / path, picks.get(key)
        if isinstance(pick, str):
            console.print(f"  {engine}: no export ({escape(pick)})", highlight=False)
            continue
        if pick is None or not file.exists():
            continue
        whose = "" if pick.number == number else f" (trial {pick.number}, best it can express)"
        console.print(f"  {engine}{whose}: {escape(str(file))}", highlight=False)
