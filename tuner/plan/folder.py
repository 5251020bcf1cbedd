"""Write a plan's run folder: plan.csv, plan.yaml, plan.html and each GPU kind's launch exports."""

from __future__ import annotations

import csv
import re
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from tuner.errors import InputError
from tuner.export.registry import engine_words
from tuner.knobs.registry import footprint_knobs, footprint_words, get
from tuner.plan.chart import chart_data, render_html
from tuner.plan.models import KindPlan, Option, PlanRequest, PlanResult
from tuner.plan.plan_file import PlanFile, load_plan
from tuner.plan.search import REFINED_KNOBS
from tuner.result_io import dump_result, write_atomic
from tuner.run.exports import write_exports
from tuner.run.folder import claim_run_dir
from tuner.run.identity import differing_fields, other_run_error
from tuner.run.lock import run_folder_lock
from tuner.run_spec import RUN_FILE, RunSpec

__all__ = [
    "CSV_FIELDS",
    "PLAN_FILES",
    "check_plan_dir",
    "plan_dir_name",
    "plan_rows",
    "summary_lines",
    "write_plan",
    "write_plan_folder",
]

PLAN_FILES = ("plan.csv", "plan.yaml", "plan.html")

# The variant's knobs a plan decides: its footprint, then the batch limits it refines.
_KNOB_COLUMNS = tuple(k.name for k in footprint_knobs()) + REFINED_KNOBS
CSV_FIELDS = (
    "rank",
    "gpu",
    "status",
    "best",
    "tp",
    "replicas",
    "gpus",
    "target_rps",
    "capacity_rps_per_replica",
    "utilisation",
    "usd_per_gpu_hour",
    "usd_per_hour",
    "usd_per_m_output_tokens",
    "usd_per_m_total_tokens",
    "ttft_ms",
    "tpot_ms",
    "energy_j_per_output_token_estimate",
    *_KNOB_COLUMNS,
    "max_context_tokens",
    "price_source",
    "price_checked",
    "note",
)


def _option_row(rank: int, kind: KindPlan, o: Option) -> dict[str, Any]:
    c = o.config
    return {
        "rank": rank,
        "gpu": o.gpu,
        "status": kind.status,
        "best": o is kind.best,
        "tp": o.tp,
        "replicas": o.replicas,
        "gpus": o.gpus,
        "target_rps": o.target_rps,
        "capacity_rps_per_replica": o.capacity_rps_per_replica,
        "utilisation": o.utilisation,
        "usd_per_gpu_hour": o.usd_per_gpu_hour,
        "usd_per_hour": o.usd_per_hour,
        "usd_per_m_output_tokens": o.usd_per_m_output_tokens,
        "usd_per_m_total_tokens": o.usd_per_m_total_tokens,
        "ttft_ms": o.ttft_ms,
        "tpot_ms": o.tpot_ms,
        "energy_j_per_output_token_estimate": o.energy_j_per_output_token,
        **{name: get(name).plain(getattr(c, name)) for name in _KNOB_COLUMNS},
        "max_context_tokens": o.max_context_tokens,
        "price_source": kind.price.source if kind.price else "",
        "price_checked": kind.price.checked.isoformat() if kind.price else "",
        "note": o.fit,
    }


def plan_rows(result: PlanResult) -> list[dict[str, Any]]:
    """One row per (GPU kind, TP) searched; kinds without an option get one row with the reason."""
    rows: list[dict[str, Any]] = []
    for rank, kind in enumerate(result.kinds, start=1):
        if not kind.options:
            rows.append(
                {"rank": rank, "gpu": kind.gpu, "status": kind.status, "note": kind.reason or ""}
            )
        rows += [_option_row(rank, kind, o) for o in kind.options]
    return [{f: r.get(f, "") for f in CSV_FIELDS} for r in rows]


def summary_lines(result: PlanResult) -> list[str]:
    """Plain sentences: the cheapest kind, missing prices, kinds that cannot serve, the caveats."""
    req = result.request
    lines = []
    best = next((k for k in result.kinds if k.gpu == result.cheapest), None)
    if best is not None and best.best is not None:
        o = best.best
        lines.append(
            f"cheapest meeting the SLA: {o.gpus}x {o.gpu} (tp={o.tp}, {o.replicas} replica(s), "
            f"{footprint_words(o.config)}) at "
            f"${o.usd_per_hour:.2f}/hour, ${o.usd_per_m_output_tokens:.3f} per 1M output tokens"
        )
    elif result.ok:
        lines.append("no GPU kind meeting the SLA has a price; ranked by GPUs needed")
    for kind in result.kinds:
        if kind.status != "ok":
            lines.append(f"{kind.gpu}: {kind.status}: {kind.reason}")
    if result.missing_prices:
        lines.append(f"no price for: {', '.join(result.missing_prices)} (pass --prices FILE)")
    lines.append(
        f"headroom {req.headroom:.0%}: replicas = ceil(target x {1 + req.headroom:g} / capacity "
        "per replica); energy is an estimate (TDP x utilisation, idle power not counted); "
        "latencies, capacities and energy are simulated for "
        f"{engine_words(req.engine)} (--engine), not measured"
    )
    bands = {k.best.band_source for k in result.ok if k.best is not None and k.best.band_source}
    for source in sorted(bands):
        lines.append(f"capacity band: {source}")
    return lines


def plan_dir_name(result: PlanResult, now: datetime) -> str:
    """reports/<timestamp>-plan-<model>-<sla> folder name."""
    req = result.request

    def slug(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-") or "x"

    return f"{now.strftime('%Y%m%d-%H%M%S')}-plan-{slug(req.model.name)}-{slug(req.sla.name)}"


def _export_spec(result: PlanResult, o: Option) -> RunSpec:
    req = result.request
    return RunSpec(
        model=req.model,
        gpu=req.gpu(o.gpu),
        sla=req.sla,
        workload=req.workload,
        space=req.space,
        num_gpus=o.tp,
        model_source=req.model.hf_id or req.model.name,
    )


def check_plan_dir(req: PlanRequest, run_dir: Path) -> None:
    """Refuse a --run-dir that holds a tune run or another request's plan; the same request's
    plan is rewritten whole (a plan has no trials to keep)."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: is a file; the run folder must be a folder")
    if (run_dir / RUN_FILE).exists():
        raise InputError(f"{run_dir} holds a tune run ({RUN_FILE}); choose another --run-dir")
    if (run_dir / "plan.yaml").is_file():
        there = load_plan(run_dir / "plan.yaml").request.model_dump(mode="json")
        here = req.model_dump(mode="json")
        if differing_fields(there, here):
            remedy = "choose another --run-dir, or leave it out (each plan gets a new folder)"
            raise other_run_error(str(run_dir), there, here, remedy)
        return
    if any((run_dir / name).exists() for name in (*PLAN_FILES, "exports")):
        raise InputError(
            f"{run_dir} holds a plan's files but no plan.yaml (whose plan is unknown); "
            "choose another --run-dir"
        )


def write_plan_folder(
    result: PlanResult, *, run_dir: Path | None, out: Path, now: datetime
) -> Path:
    """Write the plan to `run_dir` (checked, and held while written), else to a new folder under
    `out`, created exclusively so two plans started in the same second never share one."""
    if run_dir is None:
        folder = claim_run_dir(out, plan_dir_name(result, now))
        write_plan(result, folder)
        return folder
    with run_folder_lock(run_dir):
        check_plan_dir(result.request, run_dir)  # again: another plan may have written it since
        write_plan(result, run_dir)
    return run_dir


def write_plan(result: PlanResult, run_dir: Path) -> dict[str, Path]:
    """Write the run folder; returns name -> path (exports/<gpu>/ per kind meeting the SLA)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    files = {n: run_dir / n for n in PLAN_FILES}
    # plan.yaml first: it says whose folder this is (check_plan_dir), even if the rest is cut
    # short; the exports of a kind that no longer meets the SLA must not outlive their plan.
    write_atomic(files["plan.yaml"], dump_result(PlanFile(**dict(result))))
    shutil.rmtree(run_dir / "exports", ignore_errors=True)
    with files["plan.csv"].open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(plan_rows(result))
    for kind in result.ok:
        assert kind.best is not None
        # A profile's name (a user's --gpus FILE) is a folder name here: no '/' or '..' in it.
        folder = (
            run_dir / "exports" / (re.sub(r"[^A-Za-z0-9._-]+", "-", kind.gpu).strip("-.") or "gpu")
        )
        write_exports(kind.best.config, _export_spec(result, kind.best), folder)
        files[f"exports/{kind.gpu}"] = folder
    html_text = render_html(chart_data(result), summary_lines(result))
    files["plan.html"].write_text(html_text)
    return files
