"""Write a run's result files (CSV, best.yaml, exports, report) from its trial records."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import InputError
from tuner.export import ENGINES, sglang, trtllm, vllm
from tuner.export.bundle import EngineExport
from tuner.run.capacity_out import (
    CAPACITY_COLUMNS,
    capacity_block,
    engine_picks,
    expressible,
    load_unit,
    write_frontier_csv,
)
from tuner.run.report import render_html, report_data
from tuner.run.spec import RunSpec
from tuner.search.pareto import ParetoResult
from tuner.search.trials import TrialRecord
from tuner.specs import EngineConfig, Metrics

__all__ = [
    "OUTPUT_FILES",
    "claim_run_dir",
    "make_run_dir",
    "export_config",
    "write_best",
    "write_engine_exports",
    "write_exports",
    "write_outputs",
    "write_trials_csv",
]

OUTPUT_FILES = ("report.html", "trials.csv", "pareto.csv", "best.yaml", "run.yaml")
_KNOBS = tuple(EngineConfig.model_fields)
# Files derived from the study: removed before a rewrite, so an interrupted write leaves none
# that is stale (run.yaml is the run's input, not derived).
_DERIVED = tuple(n for n in OUTPUT_FILES if n != "run.yaml")
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


def _write_text(path: Path, text: str) -> None:
    """Write via a temporary file and rename: a reader (or Ctrl-C) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _clear_derived(run_dir: Path) -> None:
    for name in _DERIVED:
        (run_dir / name).unlink(missing_ok=True)
    exports = run_dir / "exports"
    if exports.is_dir():  # the recommendation's files; trial-N/ folders are `tuner export`'s
        for f in exports.iterdir():
            if f.is_file():
                f.unlink()


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
    _write_text(path, buffer.getvalue())


def export_config(
    config: EngineConfig,
    spec: RunSpec,
    metrics: Metrics | None = None,
    engines: tuple[str, ...] = ENGINES,
) -> dict[str, EngineExport | str]:
    """Each engine's export for `config`, or the reason that engine cannot express it."""
    out: dict[str, EngineExport | str] = {}
    model = spec.model_source
    makers = {
        "vllm": lambda: vllm.export(config, model, gpu=spec.gpu),
        "sglang": lambda: sglang.export(config, model, gpu=spec.gpu),
        "trtllm": lambda: trtllm.export(config, model, metrics=metrics, gpu=spec.gpu),
    }
    for engine, make in makers.items():
        if engine not in engines:
            continue
        try:
            out[engine] = make()
        except InputError as exc:
            out[engine] = str(exc)
    return out


def write_exports(
    config: EngineConfig, spec: RunSpec, folder: Path, metrics: Metrics | None = None
) -> dict[str, EngineExport | str]:
    """Write every engine's files plus a README with commands and caveats into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    exports = export_config(config, spec, metrics)
    readme = ["# Launch recipes for this variant", ""]
    readme.append(yaml.safe_dump({"config": config.model_dump(mode="json")}, sort_keys=False))
    for engine, exp in exports.items():
        if isinstance(exp, str):
            readme += [f"## {engine}: not expressible", "", exp, ""]
            continue
        for name, text in exp.files.items():
            (folder / name).write_text(text)
        readme += [f"## {engine} {exp.version}", "", exp.command, ""]
        readme += [f"NOTE: {n}" for n in exp.notes] + [""]
    (folder / "README.md").write_text("\n".join(readme))
    return exports


def write_engine_exports(
    picks: dict[str, TrialRecord | str],
    spec: RunSpec,
    folder: Path,
    recommended: TrialRecord | None,
) -> None:
    """Each engine's files from the best variant it can express, plus a README saying which."""
    folder.mkdir(parents=True, exist_ok=True)
    readme = ["# Launch recipes: each engine gets the best front variant it can express", ""]
    for engine, pick in picks.items():
        if isinstance(pick, str):
            readme += [f"## {engine}: nothing to export", "", pick, ""]
            continue
        assert pick.config is not None
        exp = export_config(pick.config, spec, pick.metrics, engines=(engine,))[engine]
        assert not isinstance(exp, str)
        for name, text in exp.files.items():
            (folder / name).write_text(text)
        which = "the recommended variant"
        if recommended is not None and pick.number != recommended.number:
            assert recommended.config is not None
            why = expressible(engine, recommended.config, spec)
            which = (f"trial {pick.number}, the best variant {engine} can express (the "
                     f"recommended trial {recommended.number} is not: {why})")  # fmt: skip
        op = pick.capacity.operating or pick.capacity.at_sla if pick.capacity else None
        if op is not None and pick.capacity is not None:
            which += (f"; drive it at {op.load:.4g} {load_unit(pick.capacity.mode)} per replica "
                      f"({op.output_tokens_per_s_per_gpu:.0f} output tok/s per GPU)")  # fmt: skip
        readme += [f"## {engine} {exp.version}: {which}", "",
                   yaml.safe_dump({"config": pick.config.model_dump(mode="json")}, sort_keys=False),
                   exp.command, ""]  # fmt: skip
        readme += [f"NOTE: {n}" for n in exp.notes] + [""]
    (folder / "README.md").write_text("\n".join(readme))


def write_best(spec: RunSpec, records: list[TrialRecord], result: ParetoResult, path: Path,
               picks: dict[str, TrialRecord | str] | None = None) -> None:  # fmt: skip
    """best.yaml: the recommended variant with its metrics, or the closest misses."""
    by_number = {r.number: r for r in records}
    data: dict[str, Any] = {"sla": spec.sla.model_dump(mode="json"), "rule": result.rule}
    if result.recommended is None:
        data["recommended"] = None
        data["closest"] = [m.model_dump() for m in result.closest]
    else:
        rec = by_number[result.recommended]
        assert rec.config is not None and rec.metrics is not None
        pct = spec.sla.percentile
        data["recommended"] = {
            "trial": rec.number,
            "headroom_met": result.headroom_met,
            "config": rec.config.model_dump(mode="json"),
            f"ttft_p{pct}_ms": rec.metrics.ttft_ms.at(pct),
            f"tpot_p{pct}_ms": rec.metrics.tpot_ms.at(pct),
            "output_tokens_per_s_per_gpu": rec.metrics.output_tokens_per_s_per_gpu,
            "output_tokens_per_s": rec.metrics.output_tokens_per_s,
            "kv_capacity_tokens": rec.metrics.kv_capacity_tokens,
            "weights_gib": rec.metrics.weights_gib,
            "backend": rec.metrics.backend,
        }
        if rec.capacity is not None and rec.capacity.at_sla is not None:
            data["recommended"].update(capacity_block(rec.capacity, rec.config, rec.metrics, pct))
    data["mode"] = result.mode
    if picks:
        data["exports"] = {e: p if isinstance(p, str) else {"trial": p.number}
                           for e, p in picks.items()}  # fmt: skip
    data["pareto_trials"] = result.front
    data["knee_trial"] = result.knee
    data["hypervolume"] = result.hypervolume
    _write_text(path, yaml.safe_dump(data, sort_keys=False))


def write_outputs(
    spec: RunSpec,
    records: list[TrialRecord],
    result: ParetoResult,
    run_dir: Path,
    importance: dict[str, dict[str, float]] | None = None,
) -> dict[str, Path]:
    """Write every result file of a run folder; returns name -> path."""
    make_run_dir(run_dir)
    _clear_derived(run_dir)
    files = {name: run_dir / name for name in OUTPUT_FILES}
    _write_text(files["run.yaml"], spec.to_yaml())
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
    picks = engine_picks(records, result, spec) if result.recommended is not None else None
    write_best(spec, records, result, files["best.yaml"], picks)
    if picks is not None:
        rec = next(r for r in records if r.number == result.recommended)
        write_engine_exports(picks, spec, run_dir / "exports", rec)
        files["exports"] = run_dir / "exports"
    data = report_data(spec, records, result, importance)
    _write_text(files["report.html"], render_html(data))
    return files
