"""The terminal summary of `tuner tune` (capacity or fixed load): readable at 80 columns and when
piped."""

from __future__ import annotations

import textwrap
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from tuner import knobs
from tuner.cli.output import print_table, say
from tuner.cli.trace_lines import trace_lines
from tuner.explain.sensitivity import effect_text, top_effects
from tuner.explain.sla_cost import sla_cost_text
from tuner.export import get_exporter
from tuner.export.registry import engine_label, engine_words
from tuner.knobs.registry import short_config
from tuner.perf.load import LoadPoint, format_load, load_unit
from tuner.perf.speculative import acceptance_note
from tuner.run.deployment_out import DEPLOYMENTS_FILE, DISAGG_EXPORTS
from tuner.run.tune import TuneOutcome, require_recommendation
from tuner.run_spec import RunSpec
from tuner.search.deployments import binding_text
from tuner.search.trials import TrialRecord
from tuner.sla import bounds_text

__all__ = [
    "MAX_FRONT_ROWS",
    "print_capacity_summary",
    "print_outcome",
    "speculation_line",
]

# Rows of the frontier printed; the full table is pareto.csv and the report.
MAX_FRONT_ROWS = 10


def speculation_line(rec: TrialRecord) -> str | None:
    """What speculative acceptance a speculating variant's result rests on (None otherwise)."""
    note = acceptance_note(rec.config, rec.metrics)
    return note.line() if note else None


def _at(p: LoadPoint, mode: str, pct: int) -> str:
    b = p.band
    pm = {q: f" +- {getattr(b, q):.0%}" if b else "" for q in ("ttft", "tpot", "throughput")}
    rate = (
        f"{p.requests_per_s_per_gpu:,.2f} req/s, {p.output_tokens_per_s_per_gpu:,.0f}"
        f"{pm['throughput']} output"
    )
    where = f"at {format_load(p.load, mode)} {load_unit(mode)} per replica"
    ttft, tpot = p.ttft_ms.at(pct), p.tpot_ms.at(pct)
    return (
        f"{rate} tok/s per GPU\n    {where}: TTFT P{pct} {ttft:,.1f} ms{pm['ttft']}, "
        f"TPOT P{pct} {tpot:,.2f} ms{pm['tpot']}"
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
        t.add_row(
            f"{q.trial}{mark}",
            escape(short_config(cfg)),
            format_load(q.load, q.mode),
            f"{q.output_tokens_per_s_per_gpu:,.0f}",
            f"{q.tpot_ms:,.2f}",
            f"{q.ttft_ms:,.1f}",
            str(len(q.variants)),
        )
    return t


def print_capacity_summary(outcome: TuneOutcome) -> None:
    """Mode, recommendation with capacity and operating load, top frontier rows, file paths."""
    spec, result = outcome.spec, outcome.result
    pct = spec.sla.percentile
    how = "open-loop Poisson rate" if spec.capacity_load == "rate" else "closed-loop users"
    say(f"mode: capacity ({how}): each variant's highest load meeting {bounds_text(spec.sla)}")
    if result.frontier:
        print_table(_front_table(outcome))
        say(f"load: {load_unit(spec.capacity_load)} per replica; s/b: max seqs / batched tokens;")
        say("n: variants with this outcome (the knobs that did not matter: pareto.csv)")
    say(f"full tables: {outcome.files.get('pareto.csv', '')}")
    say(f"             {outcome.files.get('trials.csv', '')}")
    say(f"report: {outcome.files.get('report.html', '')}")
    number = require_recommendation(outcome)  # exits 3 with the closest misses when none
    rec = next(r for r in outcome.records if r.number == number)
    assert rec.config is not None and rec.capacity is not None
    cap = rec.capacity
    engine = engine_label(rec.config, rec.metrics)
    say(f"recommended: trial {number}: {short_config(rec.config)} on {engine}", style="bold")
    if line := speculation_line(rec):
        say(f"  {line}")
    top, op = cap.at_sla, cap.operating
    assert top is not None
    say(f"  capacity at the SLA: {_at(top, cap.mode, pct)}")
    if op is not None:
        say(f"  operate at ({cap.headroom:.0%} headroom): {_at(op, cap.mode, pct)}")
        if op.band:  # on its own line: the summary stays within 100 columns
            say(f"    {op.band.rule_text()}")
            say(f"  {op.band.text()}")
    else:
        say("  no probed load keeps the headroom margin and the error band: run below capacity")
    _print_binding(rec)
    extra = {
        **(rec.metrics.extra if rec.metrics else {}),
        "capacity_rps_per_gpu": top.requests_per_s_per_gpu,
    }
    for line in trace_lines(extra, spec.workload, cap.tensor_parallel_size, searched=True):
        say(f"  {line}")
    _print_knob_effects(outcome)
    _print_sla_cost(outcome)
    _print_deployments(outcome)
    _print_exports(outcome, number)


def _print_deployments(outcome: TuneOutcome) -> None:
    """Aggregated replicas or disaggregated pools: the comparison and, when it wins, the pools."""
    choice = outcome.analysed.deployments
    if choice is None:
        return
    agg = choice.aggregated_rps_per_gpu
    best = choice.best
    if best is None:
        say(f"  disaggregated prefill/decode: not considered ({choice.skipped})")
        return
    gain = best.rps_per_gpu / agg - 1 if agg > 0 else float("inf")
    verdict = "recommended" if choice.disaggregated_wins else "not better"
    head = (
        f"disaggregated {best.deployment.shape()} on {best.deployment.gpus} of "
        f"{outcome.spec.num_gpus} GPUs: {best.rps_per_gpu:.2f} req/s per GPU vs {agg:.2f} "
        f"aggregated ({gain:+.0%}): {verdict}"
    )
    for line in textwrap.wrap(head, _WIDTH, initial_indent="  ", subsequent_indent="      "):
        say(line)
    if choice.disaggregated_wins:
        for line in textwrap.wrap(
            "binding limit: " + binding_text(best, outcome.spec.sla),
            _WIDTH,
            initial_indent="    ",
            subsequent_indent="      ",
        ):
            say(line)
        folder = outcome.run_dir / "exports" / DISAGG_EXPORTS
        if folder.is_dir():
            say(f"    launch files: {folder}")
    if choice.skipped:
        say(f"    {choice.skipped}")
    say(f"    every deployment searched: {outcome.files.get(DEPLOYMENTS_FILE, '')}")


def _print_sla_cost(outcome: TuneOutcome) -> None:
    lines = sla_cost_text(outcome.analysed.explained.sla_cost)
    if lines:
        say("  what the SLA costs, tightest and loosest bound (simulator; all: sla_cost.csv):")
        for line in lines:
            say(f"    {line}")


# The summary's width: it reads at 100 columns and when piped (the long lines wrap here).
_WIDTH = 100


def _print_binding(rec: TrialRecord) -> None:
    """What stops the recommended variant's load from rising, and why (best.yaml: binding)."""
    extra = rec.metrics.extra if rec.metrics else {}
    if "binding" not in extra:
        return
    for head, key in (("binding limit: ", "binding_bound_text"), ("", "binding_driver_text")):
        lines = textwrap.wrap(
            head + str(extra[key]),
            _WIDTH,
            initial_indent="  " if head else "    ",
            subsequent_indent="      ",
        )
        for line in lines:
            say(line)


def _print_knob_effects(outcome: TuneOutcome) -> None:
    top = top_effects(outcome.analysed.explained.sensitivity)
    if not top:
        return
    say("  capacity if one knob alone moves (simulator; every value: sensitivity.csv):")
    for e in top:
        # A gain means a neighbour of the pick predicts more: the search did not reach it.
        hint = " (beats the pick: try more --trials)" if (e.change_pct or 0) > 1 else ""
        say(f"    {effect_text(e)}{hint}")


def _print_exports(outcome: TuneOutcome, number: int) -> None:
    """Each engine's launch script, or why it has none (the analysed run's picks, in their
    order: the recommended engine's script first)."""
    picks = outcome.analysed.picks or {}
    for name, pick in picks.items():
        exporter = get_exporter(name)
        engine, file = exporter.display_name, outcome.run_dir / "exports" / exporter.script
        if isinstance(pick, str):
            say(f"  {engine}: no export ({pick})")
            continue
        if not file.exists():
            continue
        trial = pick.record.number
        whose = " (recommended)" if trial == number else f" (trial {trial}, its best variant)"
        say(f"  {engine}{whose}: {file}")


def _primary_script(outcome: TuneOutcome) -> Path | None:
    """The recommended engine's launch script, when the run wrote one."""
    for name, pick in (outcome.analysed.picks or {}).items():
        if not isinstance(pick, str) and pick.primary:
            return outcome.run_dir / "exports" / get_exporter(name).script
    return None


def _load_text(spec: RunSpec) -> str:
    wl = spec.workload
    if wl.rate_rps is not None:
        return f"Poisson rate {wl.rate_rps:g} req/s"
    return f"{wl.users} closed-loop users"


def _cell(value: object) -> str:
    """A knob value in the Pareto table (booleans as on/off, None as -)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else str(value)


def _pareto_table(outcome: TuneOutcome) -> Table:
    pct = outcome.spec.sla.percentile
    t = Table(title=f"Pareto set ({len(outcome.result.front)} of {len(outcome.records)} trials)")
    shown = knobs.searched()
    columns = ("trial", *(k.label for k in shown), f"TTFT P{pct} ms", f"TPOT P{pct} ms")
    for col in (*columns, "tok/s/GPU"):
        t.add_column(col, justify="right")
    by_number = {r.number: r for r in outcome.records}
    for n in outcome.result.front:
        r = by_number[n]
        c, m = r.config, r.metrics
        assert c is not None and m is not None
        values = c.model_dump(mode="json")
        recommended = n == outcome.result.recommended
        t.add_row(
            f"{n}{' *' if recommended else ''}",
            *(_cell(values[k.name]) for k in shown),
            f"{m.ttft_ms.at(pct):.1f}",
            f"{m.tpot_ms.at(pct):.2f}",
            f"{m.output_tokens_per_s_per_gpu:,.0f}",
            style="bold black on yellow" if recommended else None,
        )
    return t


def print_outcome(outcome: TuneOutcome) -> None:
    """The summary of a finished or rebuilt tune: capacity mode, or the fixed load's Pareto set."""
    if outcome.result.mode == "capacity":
        print_capacity_summary(outcome)
        return
    say(f"mode: fixed load ({_load_text(outcome.spec)})")
    if outcome.result.front:
        print_table(_pareto_table(outcome))
    say(f"run folder: {outcome.run_dir}")
    for name, path in sorted(outcome.files.items()):
        say(f"  {name}: {path}")
    number = require_recommendation(outcome)  # exits 3 with the closest misses when none
    room = "" if outcome.result.headroom_met else " (meets the SLA without the headroom margin)"
    rec = next(r for r in outcome.records if r.number == number)
    assert rec.config is not None
    engine = engine_label(rec.config, rec.metrics)
    say(f"recommended: trial {number}{room} on {engine} (* in the table)", style="bold")
    if line := speculation_line(rec):
        say(f"  {line}")
    script = _primary_script(outcome)
    if script is not None and script.exists():
        command = script.read_text().split("exec ", 1)[-1].strip()
        say(f"{engine_words(rec.config.engine)}: {command}")
