"""The files of a screened tune: confirm.csv (predicted vs measured per confirmed variant),
confirm.yaml (every input and result), best.yaml and exports/ from the measured recommendation."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from tuner.result_io import dump_result, write_atomic
from tuner.run.best_file import MeasuredPick, ScreenedBest, VariantSummary
from tuner.run.capacity_out import capacity_fields
from tuner.run.exports import write_exports
from tuner.run_spec import RunSpec
from tuner.screen.confirm_file import CONFIRM_HEADER, ConfirmFile
from tuner.screen.noise import capacity_interval
from tuner.screen.options import ScreenOptions
from tuner.screen.variant import ConfirmedVariant
from tuner.search.trials import KNOBS

__all__ = [
    "CONFIRM_RULE",
    "confirm_rows",
    "write_best_measured",
    "write_confirm_csv",
    "write_confirm_yaml",
]

CONFIRM_RULE = (
    "Only measured variants are recommended: the highest measured capacity (output tokens/s per "
    "GPU at the highest load meeting every SLA bound), ties to lower TPOT. The simulator only "
    "chose which variants to measure."
)
# The Side fields confirm.csv holds as predicted_<field> / measured_<field> pairs.
_PAIRS = ("capacity_load", "capacity_rps_per_gpu", "capacity_tok_s_per_gpu")


def _round(x: float | None, digits: int = 4) -> float | str:
    return "" if x is None else round(float(x), digits)


def confirm_rows(
    variants: list[ConfirmedVariant], spec: RunSpec, recommended: ConfirmedVariant | None
) -> list[dict[str, Any]]:
    """One row per confirmed variant: knobs, status, predicted and measured values, errors."""
    pct = spec.sla.percentile
    rows = []
    for v in variants:
        cfg = v.config.model_dump(mode="json")
        p, m = v.predicted, v.measured
        row: dict[str, Any] = {
            "role": v.role,
            "round": v.round,
            "predicted_rank": v.predicted_rank or "",
            "screen_trial": "" if v.screen_trial is None else v.screen_trial,
            **{k: cfg[k] for k in KNOBS},
            "status": v.status,
            "meets_sla": v.meets_sla,
            "recommended": v is recommended,
            "load_mode": spec.capacity_load,
        }
        for field in _PAIRS:
            row[f"predicted_{field}"] = _round(getattr(p, field) if p else None)
            row[f"measured_{field}"] = _round(getattr(m, field) if m else None)
        row["capacity_rel_error"] = _round(v.rel_error("capacity_tok_s_per_gpu"))
        row["compared_load"] = _round(v.compared_load)
        for name in ("ttft", "tpot"):
            field = f"{name}_ms"
            row[f"predicted_{name}_p{pct}_ms"] = _round(getattr(p, field) if p else None, 2)
            row[f"measured_{name}_p{pct}_ms"] = _round(getattr(m, field) if m else None, 2)
            row[f"{name}_rel_error"] = _round(v.rel_error(field))
        extra = v.metrics.extra if v.metrics else {}
        row["probes"] = v.capacity.probes if v.capacity else ""
        row["budget_exhausted"] = v.capacity.budget_exhausted if v.capacity else ""
        row["measured_capacity_interval"] = _interval(v)
        row["wall_s"] = v.wall_s
        row["platform_note"] = extra.get("platform_note", "")
        row["reason"] = v.reason or ""
        rows.append(row)
    return rows


def _interval(v: ConfirmedVariant) -> str:
    """'low-high' output tok/s per GPU bounding the measured capacity ('' without a spread)."""
    bounds = capacity_interval(v)
    if bounds is None:
        return ""
    low, high = bounds
    return f"{low:.1f}-{'' if high is None else f'{high:.1f}'}"


def write_confirm_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """confirm.csv from `confirm_rows`."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue())


def write_confirm_yaml(
    path: Path,
    spec: RunSpec,
    options: ScreenOptions,
    baseline_source: str,
    variants: list[ConfirmedVariant],
    passed_over: list[str],
    gain: float | None,
) -> None:
    """confirm.yaml: the run's inputs, the options, and every confirmed variant in full."""
    doc = ConfirmFile(
        options=options,
        baseline_source=baseline_source,
        gain_over_defaults=gain,
        passed_over=passed_over,
        variants=variants,
        spec=spec,
    )
    write_atomic(path, dump_result(doc, CONFIRM_HEADER))


def _summary(v: ConfirmedVariant, pct: int) -> VariantSummary:
    m = v.measured
    return VariantSummary(
        percentile=pct,
        role=v.role,
        predicted_rank=v.predicted_rank,
        screen_trial=v.screen_trial,
        status=v.status,
        meets_sla=v.meets_sla,
        config=v.config,
        capacity_tok_s_per_gpu=m.capacity_tok_s_per_gpu if m else None,
        ttft_ms=m.ttft_ms if m else None,
        tpot_ms=m.tpot_ms if m else None,
    )


def write_best_measured(
    spec: RunSpec,
    recommended: ConfirmedVariant | None,
    baseline: ConfirmedVariant,
    gain: float | None,
    run_dir: Path,
) -> dict[str, Path]:
    """best.yaml (and exports/ when something met the SLA) from the measured recommendation."""
    pct = spec.sla.percentile
    files = {"best.yaml": run_dir / "best.yaml"}
    pick = None
    if recommended is not None:
        cap, metrics = recommended.capacity, recommended.metrics
        assert cap is not None and metrics is not None
        fields = capacity_fields(cap, recommended.config, metrics, pct)
        pick = MeasuredPick(
            **dict(_summary(recommended, pct)), **dict(fields), backend=metrics.backend
        )
        write_exports(recommended.config, spec, run_dir / "exports", metrics)
        files["exports"] = run_dir / "exports"
    best = ScreenedBest(
        sla=spec.sla,
        rule=CONFIRM_RULE,
        recommended=pick,
        baseline=_summary(baseline, pct),
        gain_over_defaults=gain,
        screen="screen/best.yaml holds the simulator's own (unmeasured) pick",
    )
    write_atomic(files["best.yaml"], dump_result(best))
    return files
