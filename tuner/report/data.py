"""The tune report's data: a plain ReportData computed from the run's records, before any figure.

`report_data` is pure and tested; tuner.report.figures draws from it, tuner.report.render lays
the page out.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tuner.answer.card import AnswerCard, Explanations, answer_card
from tuner.perf.speculative import acceptance_for
from tuner.report.capacity import CapacityReport, capacity_report
from tuner.run_spec import RunSpec
from tuner.search.pareto import ParetoResult
from tuner.search.trials import KNOBS as KNOB_COLUMNS
from tuner.search.trials import TrialRecord
from tuner.specs import SLA
from tuner.validity import allowed_values

__all__ = ["Point", "ReportData", "report_data"]


class Point(BaseModel):
    """One evaluated variant as the plots need it."""

    number: int
    knobs: dict[str, Any]
    ttft_ms: float
    tpot_ms: float
    tput_per_gpu: float
    capacity_tok_s_per_gpu: float | None = None  # capacity mode: goodput at the SLA
    band_pct: dict[str, float] = {}  # predicted quantity -> error band, % (sim only)
    binding: str = ""  # capacity mode: what stops its load, and why (tuner.backends.binding)
    meets_sla: bool
    on_front: bool
    recommended: bool
    hover: str


class ReportData(BaseModel):
    """Everything the report shows, computed from the run's records (no Plotly objects)."""

    title: str
    inputs: dict[str, str]
    percentile: int
    ttft_bound_ms: float | None
    tpot_bound_ms: float | None
    points: list[Point]
    front: list[int]
    recommended: int | None
    headroom_met: bool
    knee: int | None
    rule: str
    history_numbers: list[int]  # trial numbers in order
    history_tput: list[float | None]  # feasible throughput per trial (None otherwise)
    best_so_far: list[float | None]
    hv_history: list[float]
    importance: dict[str, dict[str, float]]  # objective -> knob -> importance
    counts: dict[str, int]
    pruned_reasons: dict[str, int]
    closest: list[str]
    capacity: CapacityReport | None = None
    answer: AnswerCard | None = None  # capacity runs with a recommendation
    explained: Explanations = Explanations()
    deployments: dict[str, Any] | None = None  # deployments.yaml's data, when compared


def _hover(r: TrialRecord, pct: int) -> str:
    """The point's hover text: its knobs and its latencies and throughput."""
    assert r.config is not None and r.metrics is not None
    cfg = r.config.model_dump(mode="json")
    lines = [f"<b>trial {r.number}</b>"] + [f"{k}: {v}" for k, v in cfg.items()]
    m = r.metrics
    lines += [
        f"TTFT P{pct}: {m.ttft_ms.at(pct):.1f} ms",
        f"TPOT P{pct}: {m.tpot_ms.at(pct):.2f} ms",
        f"output tok/s/GPU: {m.output_tokens_per_s_per_gpu:.0f}",
    ]
    return "<br>".join(lines)


def _point(r: TrialRecord, result: ParetoResult, spec: RunSpec) -> Point:
    """One evaluated, feasible trial as the plots and the Pareto table show it."""
    assert r.config is not None and r.metrics is not None
    pct, extra = spec.sla.percentile, r.metrics.extra
    knobs = r.config.model_dump(mode="json")
    capacity = extra.get("capacity_tok_s_per_gpu")
    return Point(
        number=r.number,
        knobs={k: knobs[k] for k in KNOB_COLUMNS},
        ttft_ms=r.metrics.ttft_ms.at(pct),
        tpot_ms=r.metrics.tpot_ms.at(pct),
        tput_per_gpu=r.metrics.output_tokens_per_s_per_gpu,
        capacity_tok_s_per_gpu=float(capacity) if isinstance(capacity, int | float) else None,
        band_pct=_bands(extra),
        binding=str(extra.get("binding_evidence", "")),
        meets_sla=r.meets(spec.sla),
        on_front=r.number in result.front,
        recommended=r.number == result.recommended,
        hover=_hover(r, pct),
    )


def _history(ordered: list[TrialRecord], sla: SLA) -> tuple[list[float | None], list[float | None]]:
    """Per trial in order: its throughput when it meets the SLA (else None), and the best so far."""
    tput: list[float | None] = []
    best: list[float | None] = []
    running: float | None = None
    for r in ordered:
        value = r.metrics.output_tokens_per_s_per_gpu if r.metrics and r.meets(sla) else None
        tput.append(value)
        if value is not None and (running is None or value > running):
            running = value
        best.append(running)
    return tput, best


def _counts(records: list[TrialRecord], result: ParetoResult) -> dict[str, int]:
    """Trials by state, those meeting the SLA, and the distinct evaluations."""
    counts = {s: sum(r.state == s for r in records) for s in ("complete", "pruned", "failed")}
    counts["meets SLA"] = len(result.feasible)
    counts["evaluations"] = sum(r.evaluated and r.duplicate_of is None for r in records)
    return counts


def _pruned_reasons(records: list[TrialRecord]) -> dict[str, int]:
    """Pruned trials by rule (the reason up to its first `=`)."""
    pruned: dict[str, int] = {}
    for r in records:
        if r.state == "pruned" and r.reason:
            key = r.reason.split("=")[0]
            pruned[key] = pruned.get(key, 0) + 1
    return pruned


def report_data(
    spec: RunSpec,
    records: list[TrialRecord],
    result: ParetoResult,
    importance: dict[str, dict[str, float]] | None = None,
    explained: Explanations | None = None,
    card: AnswerCard | None = None,
    deployments: dict[str, Any] | None = None,
) -> ReportData:
    """Gather the report's numbers from a finished run (`explained`: the sensitivity and the
    SLA-cost curve around the recommendation, when the run folder computed them; `card`: the
    analysed run's answer card, else computed here from the records)."""
    explained = explained or Explanations()
    rec = next((r for r in records if r.number == result.recommended), None)
    sla = spec.sla
    points = [
        _point(r, result, spec)
        for r in records
        if r.evaluated and r.config and r.metrics and r.metrics.feasible
    ]
    ordered = sorted(records, key=lambda r: r.number)
    tput, best = _history(ordered, sla)
    return ReportData(
        title=f"tuner: {spec.model.name} on {spec.gpu.name}, SLA {sla.name}",
        inputs=_inputs(spec),
        percentile=sla.percentile,
        ttft_bound_ms=sla.ttft_ms,
        tpot_bound_ms=sla.tpot_ms,
        points=points,
        front=result.front,
        recommended=result.recommended,
        headroom_met=result.headroom_met,
        knee=result.knee,
        rule=result.rule,
        history_numbers=[r.number for r in ordered],
        history_tput=tput,
        best_so_far=best,
        hv_history=result.hv_history,
        importance=importance or {},
        counts=_counts(records, result),
        pruned_reasons=_pruned_reasons(records),
        closest=[f"trial {m.number}: {m.text}" for m in result.closest],
        capacity=capacity_report(records, result, sla) if result.mode == "capacity" else None,
        answer=card or (answer_card(rec, sla.percentile, explained) if rec is not None else None),
        explained=explained,
        deployments=deployments,
    )


def _inputs(spec: RunSpec) -> dict[str, str]:
    """The run's inputs as the report's first table shows them."""
    inputs = {
        "model": f"{spec.model.name} ({spec.model_source})",
        "GPU": f"{spec.gpu.display_name} x up to {spec.num_gpus}",
        "SLA": _sla_text(spec),
        "workload": _workload_text(spec),
        "search space": spec.space.name,
        "backend": spec.backend,
        "sampler": f"{spec.sampler} (seed {spec.seed}), {spec.trials} trials",
    }
    # Only the drafts this model can speculate with (no MTP layers: no mtp).
    runnable, _ = allowed_values("draft_model", spec.space.draft_model, spec.context())
    if drafts := [d for d in runnable if d]:
        inputs["speculative acceptance"] = _acceptance_text(spec, drafts)
    return inputs


def _bands(extra: dict[str, Any]) -> dict[str, float]:
    """The error bands in a trial's Metrics.extra (tuner.perf.bands.band_columns), by quantity."""
    out = {}
    for q in ("ttft", "tpot", "e2e", "throughput"):
        v = extra.get(f"{q}_band_pct")
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[q] = float(v)
    return out


def _sla_text(spec: RunSpec) -> str:
    """The SLA's bounds in words."""
    s = spec.sla
    parts = []
    if s.ttft_ms is not None:
        parts.append(f"TTFT <= {s.ttft_ms:g} ms")
    if s.tpot_ms is not None:
        parts.append(f"TPOT <= {s.tpot_ms:g} ms")
    bounds = " and ".join(parts) or "no latency bound (throughput)"
    return f"{s.name}: {bounds} at P{s.percentile}"


def _acceptance_text(spec: RunSpec, drafts: list[str]) -> str:
    """What acceptance the speculating variants' results rest on, per draft of the space."""
    if spec.backend != "sim":
        return f"measured by the {spec.backend} backend on its replayed prompts"
    return "; ".join(
        f"{d}: {acceptance_for(d, spec.workload, spec.gpu.calibration, spec.sla.kind).text}"
        for d in drafts
    )


def _workload_text(spec: RunSpec) -> str:
    """The workload in one line: lengths, what drove the load (the searched load in capacity
    mode), requests, prefix hits."""
    w = spec.workload
    if spec.is_capacity:
        load = (
            "open-loop Poisson arrivals, rate searched per variant up to its saturated rate"
            if spec.capacity_load == "rate"
            else "closed-loop users, count searched per variant"
        )
    elif w.rate_rps:
        load = f"Poisson {w.rate_rps:g} req/s"
    else:
        load = f"{w.users} closed-loop users"
    counted = f"at least {w.measured_requests} measured requests per probe"
    if not spec.is_capacity:
        counted = f"{w.measured_requests} requests"
    if source := w.trace_file or (w.sessions and f"sessions {w.sessions}"):
        load = "the speedup searched per variant" if spec.is_capacity else load
        return (
            f"{source} replayed at its recorded times scaled by {load} "
            f"(mean {w.input_tokens} in / {w.output_tokens} out tokens)"
        )
    return (
        f"{w.input_tokens} in / {w.output_tokens} out tokens (+-{w.length_spread:.0%}), {load}, "
        f"{counted}, prefix hit {w.prefix_cache_hit:.0%}, protocol {w.protocol}"
    )
