"""Write a run's result files (CSV, best.yaml, exports, report) from its trial records."""

from __future__ import annotations

import csv
import io
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.answer.analysed import AnalysedRun
from tuner.answer.picks import EnginePick
from tuner.errors import InputError
from tuner.explain.sensitivity import write_sensitivity_csv
from tuner.explain.sla_cost import write_sla_cost_csv
from tuner.perf.speculative import acceptance_note
from tuner.report.data import report_data
from tuner.report.render import render_html
from tuner.result_io import dump_result, write_atomic
from tuner.run.best_file import CapacityFields, ExportPick, TunedBest, TunedPick
from tuner.run.capacity_out import (
    CAPACITY_COLUMNS,
    capacity_fields,
    write_frontier_csv,
)
from tuner.run.deployment_out import (
    DEPLOYMENTS_FILE,
    DISAGG_EXPORTS,
    deployments_doc,
    write_deployment_exports,
    write_deployments,
)
from tuner.run.exports import write_picked_exports
from tuner.run_spec import RunSpec
from tuner.search.pareto import ParetoResult
from tuner.search.trials import TrialRecord
from tuner.specs import EngineConfig

__all__ = [
    "OUTPUT_FILES",
    "SENSITIVITY_FILE",
    "SLA_COST_FILE",
    "best_file",
    "claim_run_dir",
    "make_run_dir",
    "write_best",
    "write_outputs",
    "write_trials_csv",
]

OUTPUT_FILES = ("report.html", "trials.csv", "pareto.csv", "best.yaml", "run.yaml")
# Written by capacity runs with a recommendation only (one-knob sensitivity, tuner.explain).
SENSITIVITY_FILE = "sensitivity.csv"
SLA_COST_FILE = "sla_cost.csv"  # the pick's capacity as each SLA bound is scaled
_KNOBS = tuple(EngineConfig.model_fields)
# Files derived from the study: removed before a rewrite, so an interrupted write leaves none
# that is stale (run.yaml is the run's input, not derived).
_DERIVED = (
    *(n for n in OUTPUT_FILES if n != "run.yaml"),
    SENSITIVITY_FILE,
    SLA_COST_FILE,
    DEPLOYMENTS_FILE,
)
# Suffixes tried when a timestamped run folder name is taken (two tunes in the same second).
_MAX_NAME_SUFFIX = 1000


def _folder_error(path: Path, exc: OSError) -> InputError:
    if isinstance(exc, FileExistsError | NotADirectoryError):
        return InputError(f"{path}: a file is in the way; a run folder must be a folder")
    return InputError(f"{path}: cannot create the run folder ({exc.strerror or exc})")


def make_run_dir(path: Path) -> None:
    """Create `path` (and parents) as a folder, or say in one line why it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _folder_error(path, exc) from exc


def claim_run_dir(parent: Path, name: str) -> Path:
    """Create a new, empty run folder `parent/name` (or `name-2`, `name-3`...) exclusively.

    mkdir without exist_ok is atomic, so two tunes started in the same second never share one.
    """
    make_run_dir(parent)
    for i in range(1, _MAX_NAME_SUFFIX + 1):
        path = parent / (name if i == 1 else f"{name}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise _folder_error(path, exc) from exc
    raise InputError(f"{parent}: {_MAX_NAME_SUFFIX} run folders named {name}; use --run-dir")


def _clear_derived(run_dir: Path) -> None:
    for name in _DERIVED:
        (run_dir / name).unlink(missing_ok=True)
    exports = run_dir / "exports"
    if exports.is_dir():  # the recommendation's files; trial-N/ folders are `tuner export`'s
        for f in exports.iterdir():
            if f.is_file():
                f.unlink()
        shutil.rmtree(exports / DISAGG_EXPORTS, ignore_errors=True)


def _row(r: TrialRecord, spec: RunSpec) -> dict[str, Any]:
    pct = spec.sla.percentile
    row: dict[str, Any] = {"trial": r.number, "state": r.state}
    cfg = r.config.model_dump(mode="json") if r.config else {}
    for k in _KNOBS:
        row[k] = cfg.get(k, r.params.get(k, ""))
    m = r.metrics
    row["meets_sla"] = r.meets(spec.sla)
    row["duplicate_of"] = "" if r.duplicate_of is None else r.duplicate_of
    row["reason"] = r.reason or ""
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        for p in (50, pct, 99):
            row[f"{name.removesuffix('_ms')}_p{p}_ms"] = getattr(m, name).at(p) if m else ""
    row["output_tokens_per_s"] = m.output_tokens_per_s if m else ""
    row["output_tokens_per_s_per_gpu"] = m.output_tokens_per_s_per_gpu if m else ""
    for name in CAPACITY_COLUMNS:
        row[name] = m.extra.get(name, "") if m else ""
    row["goodput_rps"] = m.goodput_rps if m else ""
    row["weights_gib"] = m.weights_gib if m else ""
    row["kv_capacity_tokens"] = m.kv_capacity_tokens if m else ""
    row["backend"] = m.backend if m else ""
    row["duration_s"] = "" if r.duration_s is None else round(r.duration_s, 4)
    return row


def write_trials_csv(records: list[TrialRecord], spec: RunSpec, path: Path) -> None:
    """One row per trial: knobs, state, SLA status, latencies, throughput, memory."""
    rows = [_row(r, spec) for r in records]
    fields = list(_row(TrialRecord(number=0, state="failed", params={}), spec))
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue())


def _tuned_pick(rec: TrialRecord, result: ParetoResult, pct: int) -> TunedPick:
    assert rec.config is not None and rec.metrics is not None
    m = rec.metrics
    cap = rec.capacity
    fields = capacity_fields(cap, rec.config, m, pct) if cap and cap.at_sla else CapacityFields()
    return TunedPick(
        percentile=pct,
        trial=rec.number,
        headroom_met=result.headroom_met,
        config=rec.config,
        engine_version=_engine_version(m.extra.get("engine_version")),
        ttft_ms=m.ttft_ms.at(pct),
        tpot_ms=m.tpot_ms.at(pct),
        output_tokens_per_s_per_gpu=m.output_tokens_per_s_per_gpu,
        output_tokens_per_s=m.output_tokens_per_s,
        kv_capacity_tokens=m.kv_capacity_tokens,
        weights_gib=m.weights_gib,
        backend=m.backend,
        **_speculation(rec),
        **dict(fields),
    )


def _engine_version(value: object) -> str | None:
    """The engine release the metrics describe (the simulator's record), when they carry one."""
    return None if value in (None, "") else str(value)


def _speculation(rec: TrialRecord) -> dict[str, Any]:
    """best.yaml's note of what a speculating pick's acceptance rests on."""
    note = acceptance_note(rec.config, rec.metrics)
    return {} if note is None else {"speculation": note.text, "speculation_measured": note.measured}


def best_file(
    spec: RunSpec,
    records: list[TrialRecord],
    result: ParetoResult,
    picks: Mapping[str, EnginePick | str] | None = None,
) -> TunedBest:
    """best.yaml's content: the recommended variant with its metrics, or the closest misses."""
    rec = next((r for r in records if r.number == result.recommended), None)
    exports = None
    if picks:
        exports = {
            e: p if isinstance(p, str) else ExportPick(trial=p.record.number)
            for e, p in picks.items()
        }
    return TunedBest(
        sla=spec.sla,
        rule=result.rule,
        mode="capacity" if result.mode == "capacity" else "fixed",
        recommended=None if rec is None else _tuned_pick(rec, result, spec.sla.percentile),
        closest=result.closest if rec is None else None,
        exports=exports,
        pareto_trials=result.front,
        knee_trial=result.knee,
        hypervolume=result.hypervolume,
    )


def write_best(
    spec: RunSpec,
    records: list[TrialRecord],
    result: ParetoResult,
    path: Path,
    picks: Mapping[str, EnginePick | str] | None = None,
) -> None:
    """Write best.yaml from `best_file`."""
    write_atomic(path, dump_result(best_file(spec, records, result, picks)))


def write_outputs(run: AnalysedRun, run_dir: Path) -> dict[str, Path]:
    """Write every result file of a run folder from its analysis; returns name -> path."""
    spec, records, result = run.spec, run.records, run.result
    make_run_dir(run_dir)
    _clear_derived(run_dir)
    files = {name: run_dir / name for name in OUTPUT_FILES}
    write_atomic(files["run.yaml"], spec.to_yaml())
    write_trials_csv(sorted(records, key=lambda r: r.number), spec, files["trials.csv"])
    front = {n: i for i, n in enumerate(result.front)}
    if result.mode == "capacity":
        write_frontier_csv(result.frontier, records, spec, files["pareto.csv"])
    else:
        write_trials_csv(
            sorted((r for r in records if r.number in front), key=lambda r: front[r.number]),
            spec,
            files["pareto.csv"],
        )
    write_best(spec, records, result, files["best.yaml"], run.picks)
    if run.picks is not None:
        write_picked_exports(run.picks, run_dir / "exports")
        files["exports"] = run_dir / "exports"
    rec = run.recommended
    if result.mode == "capacity" and rec is not None and rec.config is not None:
        files[SENSITIVITY_FILE] = run_dir / SENSITIVITY_FILE
        write_sensitivity_csv(run.explained.sensitivity, files[SENSITIVITY_FILE])
        files[SLA_COST_FILE] = run_dir / SLA_COST_FILE
        write_sla_cost_csv(run.explained.sla_cost, files[SLA_COST_FILE])
    if run.deployments is not None:
        files[DEPLOYMENTS_FILE] = run_dir / DEPLOYMENTS_FILE
        refused = write_deployment_exports(
            run.deployments, spec, run_dir / "exports" / DISAGG_EXPORTS
        )
        if refused:
            run.deployments.skipped = f"no disaggregated export: {refused}"
        write_deployments(run.deployments, spec.sla, files[DEPLOYMENTS_FILE])
    compared = deployments_doc(run.deployments, spec.sla) if run.deployments else None
    data = report_data(
        spec, records, result, run.importance, run.explained, run.card, deployments=compared
    )
    write_atomic(files["report.html"], render_html(data))
    return files
