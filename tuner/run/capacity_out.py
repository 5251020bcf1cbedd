"""Capacity-mode result files: the frontier table (pareto.csv), best.yaml's capacity block, and
which front variant each engine gets when it cannot express the recommended one."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tuner.backends.binding import BINDING_COLUMNS, EVIDENCE_KEYS
from tuner.export import ENGINES
from tuner.export.dispatch import expressible
from tuner.perf.bands import band_columns
from tuner.perf.load import Capacity, LoadPoint, load_unit, probe_at
from tuner.run.best_file import (
    BatchLimits,
    BindingBlock,
    CapacityFields,
    LoadPointBlock,
    OperatingBlock,
)
from tuner.run_spec import RunSpec
from tuner.search.frontier import FrontPoint, ranked_by_capacity
from tuner.search.pareto import ParetoResult
from tuner.search.trials import KNOBS, TrialRecord
from tuner.specs import EngineConfig, Metrics

__all__ = [
    "CAPACITY_COLUMNS",
    "binding_block",
    "capacity_fields",
    "engine_picks",
    "pick_notes",
    "write_frontier_csv",
]

# Per-trial capacity and error-band columns (trials.csv), read from Metrics.extra; in capacity
# mode the band is the one at the capacity load (tuner.backends.capacity_extra).
CAPACITY_COLUMNS = (
    "capacity_rps_per_gpu",
    "capacity_tok_s_per_gpu",
    "capacity_load",
    "operating_load",
    "operating_tok_s_per_gpu",
    *band_columns(None),
    *BINDING_COLUMNS,
)


def engine_picks(
    records: list[TrialRecord], result: ParetoResult, spec: RunSpec
) -> dict[str, TrialRecord | str]:
    """Per engine: the best-ranked variant it can express, or why none could be exported."""
    if result.mode == "capacity":
        ranked = ranked_by_capacity(records, spec.sla)
    else:
        by_number = {r.number: r for r in records}
        first = [by_number[result.recommended]] if result.recommended is not None else []
        ranked = first + [by_number[n] for n in result.front if n != result.recommended]
    picks: dict[str, TrialRecord | str] = {}
    for engine in ENGINES:
        reasons = []
        for r in ranked:
            assert r.config is not None
            why = expressible(engine, r.config, spec)
            if why is None:
                picks[engine] = r
                break
            reasons.append(why)
        else:
            first_reason = reasons[0] if reasons else "no variant met the SLA"
            picks[engine] = f"no front variant is expressible (first: {first_reason})"
    return picks


def _pick_note(engine: str, pick: TrialRecord, spec: RunSpec, recommended: TrialRecord) -> str:
    which = "the recommended variant"
    if pick.number != recommended.number:
        assert recommended.config is not None
        why = expressible(engine, recommended.config, spec)
        which = (
            f"trial {pick.number}, the best variant {engine} can express (the "
            f"recommended trial {recommended.number} is not: {why})"
        )
    cap = pick.capacity
    op = (cap.operating or cap.at_sla) if cap else None
    if op is not None and cap is not None:
        which += (
            f"; drive it at {op.load:.4g} {load_unit(cap.mode)} per replica "
            f"({op.output_tokens_per_s_per_gpu:.0f} output tok/s per GPU)"
        )
    return which


def pick_notes(
    picks: dict[str, TrialRecord | str], spec: RunSpec, recommended: TrialRecord
) -> dict[str, str]:
    """Per engine given a variant: which variant it is and the load to drive it at (README)."""
    return {
        engine: _pick_note(engine, pick, spec, recommended)
        for engine, pick in picks.items()
        if not isinstance(pick, str)
    }


def _point_fields(p: LoadPoint, pct: int) -> dict[str, Any]:
    bands = {k: None if v == "" else v for k, v in band_columns(p.band).items()}
    return {
        "percentile": pct,
        "load": p.load,
        "requests_per_s_per_gpu": p.requests_per_s_per_gpu,
        "output_tokens_per_s_per_gpu": p.output_tokens_per_s_per_gpu,
        "ttft_ms": p.ttft_ms.at(pct),
        "tpot_ms": p.tpot_ms.at(pct),
        **bands,
    }


def capacity_fields(
    cap: Capacity, config: EngineConfig, metrics: Metrics, pct: int
) -> CapacityFields:
    """best.yaml's capacity, operating load and the batch limits that reproduce them."""
    top, op = cap.at_sla, cap.operating
    assert top is not None
    return CapacityFields(
        load_mode=cap.mode,
        load_unit=load_unit(cap.mode) + " per replica",
        capacity=LoadPointBlock(**_point_fields(top, pct)),
        operating_point=OperatingBlock(
            **_point_fields(op or top, pct), headroom=cap.headroom if op else 0
        ),
        batch_limits=BatchLimits(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            peak_concurrent_seqs_at_capacity=metrics.max_concurrent_seqs,
        ),
        capacity_probes=cap.probes,
        binding=binding_block(metrics),
    )


def binding_block(metrics: Metrics) -> BindingBlock | None:
    """best.yaml's binding limit, read from the capacity search's Metrics.extra."""
    x = metrics.extra
    if "binding" not in x:
        return None  # a record from before the binding limit existed
    evidence = {k: x.get(f"binding_{k}") for k in EVIDENCE_KEYS}
    return BindingBlock(
        bound=str(x["binding"]),
        driver=str(x["binding_driver"]),
        limit=str(x["binding_bound_text"]),
        why=str(x["binding_driver_text"]),
        evidence={k: None if v is None else float(v) for k, v in evidence.items()},
    )


def _frontier_row(i: int, q: FrontPoint, r: TrialRecord, pct: int) -> dict[str, Any]:
    cfg = r.config.model_dump(mode="json") if r.config else {}
    extra = r.metrics.extra if r.metrics else {}
    probe = probe_at(r.capacity, q.load)
    return {
        "rank": i + 1,
        "trial": q.trial,
        **{k: cfg.get(k, "") for k in KNOBS},
        "load_mode": q.mode,
        "load": q.load,
        "requests_per_s_per_gpu": q.requests_per_s_per_gpu,
        "output_tokens_per_s_per_gpu": q.output_tokens_per_s_per_gpu,
        f"ttft_p{pct}_ms": q.ttft_ms,
        f"tpot_p{pct}_ms": q.tpot_ms,
        "tokens_per_s_per_user": q.tokens_per_s_per_user,
        "is_capacity": q.is_capacity,
        "capacity_rps_per_gpu": extra.get("capacity_rps_per_gpu", ""),
        "capacity_tok_s_per_gpu": extra.get("capacity_tok_s_per_gpu", ""),
        **band_columns(probe.band if probe else None),
        **{k: extra.get(k, "") for k in BINDING_COLUMNS},
        "stands_for": len(q.variants),
        "variants": " ".join(map(str, q.variants)),
        "did_not_matter": "; ".join(
            f"{k}={'/'.join(map(str, v))}" for k, v in q.did_not_matter.items()
        ),
    }


def write_frontier_csv(
    frontier: list[FrontPoint], records: list[TrialRecord], spec: RunSpec, path: Path
) -> None:
    """pareto.csv in capacity mode: one row per distinct (variant, load) outcome."""
    pct = spec.sla.percentile
    by_number = {r.number: r for r in records}
    rows = [_frontier_row(i, q, by_number[q.trial], pct) for i, q in enumerate(frontier)]
    fields = list(rows[0]) if rows else ["rank", "trial", *KNOBS, "load_mode", "load"]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
