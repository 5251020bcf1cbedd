"""Capacity-mode result files: the frontier table (pareto.csv) and best.yaml's capacity block."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tuner.backends.binding import BINDING_COLUMNS, EVIDENCE_KEYS
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
from tuner.search.frontier import FrontPoint
from tuner.search.trials import KNOBS, TrialRecord
from tuner.specs import EngineConfig, Metrics

__all__ = [
    "CAPACITY_COLUMNS",
    "binding_block",
    "capacity_fields",
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
