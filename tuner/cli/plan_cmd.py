"""`tuner plan`: GPUs of each kind, and their cost, to serve a target load within an SLA."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich import box
from rich.markup import escape
from rich.table import Table

from tuner import catalog, knobs
from tuner.bench.trace_plan import recorded_rate, trace_workload
from tuner.cli.app import app, console, err_console, finite_positive, guarded
from tuner.cli.options import InputTokens, OutputTokens
from tuner.cli.trace_options import SessionsName, TraceFile
from tuner.errors import InputError, NoFeasibleConfigError
from tuner.export.registry import engine_words
from tuner.knobs.registry import footprint_text
from tuner.plan import PlanRequest, PlanResult, load_prices, plan
from tuner.plan.folder import check_plan_dir, summary_lines, write_plan_folder
from tuner.plan.models import MAX_GPUS_PER_REPLICA, MAX_HEADROOM, MAX_PLAN_USERS, KindPlan
from tuner.plan.sizing import DEFAULT_HEADROOM
from tuner.specs import MAX_RATE_RPS, MAX_REQUESTS, MAX_SECONDS, SLA, GPUProfile

__all__ = ["build_plan_request", "plan_command"]

# A plan is for one engine (searching every engine would triple its simulator runs).
_ENGINE_HELP = (
    f"Serving engine planned for, one per plan: {', '.join(knobs.get('engine').choices or ())}"
)

# plan's own multi-line options, declared here so its signature reads one line per flag.
_TargetRate = Annotated[
    float | None,
    typer.Option(
        callback=finite_positive,
        max=MAX_RATE_RPS,
        help=f"Target Poisson rate, req/s, at most {MAX_RATE_RPS:.0f}",
    ),
]
_TargetUsers = Annotated[
    int | None,
    typer.Option(min=1, max=MAX_PLAN_USERS, help=f"Target closed-loop users, 1..{MAX_PLAN_USERS}"),
]
_ThinkTime = Annotated[
    float,
    typer.Option(
        min=0, max=MAX_SECONDS, help=f"Seconds a user waits between requests, 0..{MAX_SECONDS:g}"
    ),
]
_MaxGpusPerReplica = Annotated[
    int,
    typer.Option(
        min=1, max=MAX_GPUS_PER_REPLICA, help=f"Largest TP size tried, 1..{MAX_GPUS_PER_REPLICA}"
    ),
]
_Headroom = Annotated[
    float,
    typer.Option(min=0, max=MAX_HEADROOM, help=f"Spare capacity fraction, 0..{MAX_HEADROOM:g}"),
]
_ProbeRequests = Annotated[
    int,
    typer.Option(min=1, max=MAX_REQUESTS, help=f"Requests simulated per probe, 1..{MAX_REQUESTS}"),
]

_FLAGS = {
    "rate_rps": "--rate",
    "users": "--users",
    "think_time_s": "--think-time",
    "headroom": "--headroom",
    "max_gpus_per_replica": "--max-gpus-per-replica",
    "input_tokens": "--isl",
    "output_tokens": "--osl",
    "num_requests": "--num-requests",
    "ttft_ms": "--ttft-ms",
    "tpot_ms": "--tpot-ms",
}


def _invalid(exc: ValidationError) -> InputError:
    e = exc.errors()[0]
    msg = str(e["msg"]).removeprefix("Value error, ")
    if not e["loc"]:
        return InputError(msg)
    field = str(e["loc"][0])
    return InputError(f"{_FLAGS.get(field, field)}: {msg} (got {e.get('input')!r})")


def _gpus(gpus: str) -> list[GPUProfile]:
    if gpus.strip() == "all":
        return catalog.all_gpus()
    names = [g.strip() for g in gpus.split(",") if g.strip()]
    if not names:
        raise InputError("--gpus: give GPU profile names separated by commas, or 'all'")
    # Names, NVML aliases or YAML paths; an unknown name raises one line listing the allowed.
    profiles = {p.name: p for p in (catalog.load_gpu(n) for n in names)}
    return list(profiles.values())


def build_plan_request(
    *,
    model: str,
    sla: str,
    gpus: str,
    rate: float | None,
    users: int | None,
    think_time: float,
    headroom: float,
    max_gpus_per_replica: int,
    isl: int,
    osl: int,
    num_requests: int,
    space: str,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    engine: str = "vllm",
    trace: str | None = None,
    sessions: str | None = None,
) -> PlanRequest:
    """Validate plan's flags into a PlanRequest; one-line InputError otherwise; a trace with no
    target is planned at its recorded speed."""
    try:  # the knob's own parser: one line naming --engine and the allowed values
        the_engine = knobs.get("engine").parse(engine)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    workload = trace_workload(isl, osl, num_requests, trace, sessions)
    if rate is None and users is None:
        rate = recorded_rate(workload)
    if (rate is None) == (users is None):
        raise InputError("give exactly one target: --rate REQ_PER_S or --users N")
    if think_time and users is None:
        raise InputError(f"--think-time {think_time:g} only applies with --users")
    preset = catalog.load_sla(sla)
    try:
        bounds = {k: v for k, v in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)) if v is not None}
        the_sla = SLA.model_validate({**preset.model_dump(), **bounds}) if bounds else preset
        return PlanRequest(
            model=catalog.load_model(model),
            sla=the_sla,
            workload=workload,
            space=catalog.load_search_space(space),
            engine=the_engine,
            rate_rps=rate,
            users=users,
            think_time_s=think_time,
            headroom=headroom,
            max_gpus_per_replica=max_gpus_per_replica,
            gpus=_gpus(gpus),
        )
    except ValidationError as exc:
        raise _invalid(exc) from exc


def _money(v: float | None, digits: int) -> str:
    return "no price" if v is None else f"{v:.{digits}f}"


def _table(result: PlanResult) -> Table:
    """Ranked, one row per GPU kind; fits 80 columns and wraps (never truncates) when narrower."""
    pct = result.request.sla.percentile
    t = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        show_edge=False,
        caption=f"TTFT/TPOT: P{pct} ms at the target",
    )
    for name, just in (
        ("#", "right"),
        ("GPU", "left"),
        ("GPUs", "right"),
        ("$/hour", "right"),
        ("$/1M out", "right"),
        ("util", "right"),
        ("TTFT/TPOT", "right"),
        ("config", "left"),
    ):
        t.add_column(name, justify=just, overflow="fold")  # type: ignore[arg-type]
    for rank, kind in enumerate(result.kinds, start=1):
        o = kind.best
        if o is None:
            t.add_row(str(rank), escape(kind.gpu), "-", "-", "-", "-", "-", kind.status)
            continue
        c = o.config
        t.add_row(
            str(rank),
            escape(kind.gpu),
            str(o.gpus),
            _money(o.usd_per_hour, 2),
            _money(o.usd_per_m_output_tokens, 3),
            f"{o.utilisation:.0%}",
            f"{o.ttft_ms:.0f}/{o.tpot_ms:.1f}",
            f"tp{o.tp} {footprint_text(c)}",
        )
    return t


def _kind_lines(result: PlanResult) -> list[str]:
    """Per kind meeting the SLA: replicas, capacity, $/1M input+output, energy, and the fit."""
    lines = []
    for kind in result.ok:
        o = kind.best
        assert o is not None
        money = (
            f"${o.usd_per_m_total_tokens:.3f} per 1M input+output tokens; "
            if o.usd_per_m_total_tokens is not None
            else ""
        )
        energy = (
            f"~{o.energy_j_per_output_token:.2f} J per output token (estimate); "
            if o.energy_j_per_output_token is not None
            else ""
        )
        band = (
            f" +- {o.capacity_band:.0%} ({o.replicas_at_band} replica(s) at the band's low edge)"
            if o.capacity_band
            else ""
        )
        lines.append(
            f"{kind.gpu}: {o.replicas} replica(s) x tp{o.tp}, {o.capacity_rps_per_replica:.2f} "
            f"req/s each{band}; {money}{energy}{o.fit}"
        )
        lines.append(_disagg_line(kind))
    return lines


def _disagg_line(kind: KindPlan) -> str:
    """The disaggregated shape of a kind: its units, GPUs and cost, and which shape is cheaper."""
    d = kind.disaggregated
    if d is None:
        return f"  {kind.gpu} disaggregated: not searched"
    if isinstance(d, str):
        return f"  {kind.gpu} disaggregated: none ({d})"
    o = kind.best
    assert o is not None
    cost = f", ${d.usd_per_hour:.2f}/hour" if d.usd_per_hour is not None else ""
    verdict = "cheaper than" if d.cheaper else "not cheaper than"
    return (
        f"  {kind.gpu} disaggregated: {d.units} x {d.shape} = {d.gpus} GPUs{cost}, "
        f"{d.capacity_rps_per_unit:.2f} req/s per unit, TTFT/TPOT {d.ttft_ms:.0f}/{d.tpot_ms:.1f} "
        f"ms at capacity: {verdict} {o.gpus} GPUs aggregated; binding: {d.binding}"
    )


def _target_text(req: PlanRequest) -> str:
    if req.rate_rps is not None:
        return f"{req.rate_rps:g} req/s"
    return f"{req.users} users, {req.think_time_s:g} s think time"


def _print_plan(req: PlanRequest, result: PlanResult, folder: Path) -> None:
    """The plan on the terminal: its target, the ranked table, each kind's fit and the summary."""
    on = engine_words(req.engine)
    console.print(escape(f"{req.model.name} on {on}, SLA {req.sla.name}, {_target_text(req)}"))
    console.print(_table(result))
    for line in _kind_lines(result):
        console.print(escape(line), highlight=False)
    for line in summary_lines(result):
        console.print(escape(line), highlight=False)
    console.print(f"planned in {result.elapsed_s:.1f} s; run folder: {escape(str(folder))}")


@app.command("plan")
@guarded
def plan_command(
    model: Annotated[str, typer.Option(help="Model name, YAML card or HF config.json")],
    sla: Annotated[str, typer.Option(help="SLA preset name or YAML")] = "chat",
    rate: _TargetRate = None,
    users: _TargetUsers = None,
    think_time: _ThinkTime = 0.0,
    gpus: Annotated[str, typer.Option(help="GPU profiles, comma-separated, or 'all'")] = "all",
    prices: Annotated[Path | None, typer.Option(help="Price table YAML (default: shipped)")] = None,
    max_gpus_per_replica: _MaxGpusPerReplica = 8,
    headroom: _Headroom = DEFAULT_HEADROOM,
    isl: InputTokens = 1024,
    osl: OutputTokens = 256,
    num_requests: _ProbeRequests = 200,
    space: Annotated[str, typer.Option(help="Search space name or YAML")] = "default",
    engine: Annotated[str, typer.Option(help=_ENGINE_HELP)] = "vllm",
    trace: TraceFile = None,
    sessions: SessionsName = None,
    ttft_ms: Annotated[
        float | None, typer.Option(callback=finite_positive, help="Override the SLA's TTFT bound")
    ] = None,
    tpot_ms: Annotated[
        float | None, typer.Option(callback=finite_positive, help="Override the SLA's TPOT bound")
    ] = None,
    out: Annotated[Path, typer.Option(help="Parent folder of run folders")] = Path("reports"),
    run_dir: Annotated[Path | None, typer.Option(help="Exact run folder to write")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
) -> None:
    """How many GPUs of each kind, at what cost, serve a target load within the SLA (simulated)."""
    req = build_plan_request(
        model=model,
        sla=sla,
        gpus=gpus,
        rate=rate,
        users=users,
        think_time=think_time,
        headroom=headroom,
        max_gpus_per_replica=max_gpus_per_replica,
        isl=isl,
        osl=osl,
        num_requests=num_requests,
        space=space,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        engine=engine,
        trace=trace,
        sessions=sessions,
    )
    if run_dir is not None:
        check_plan_dir(req, run_dir)  # before the planning, not after
    price_table = load_prices(prices, extra_names=[g.name for g in req.gpus])
    if not as_json:
        err_console.print(f"planning {len(req.gpus)} GPU kind(s) for {_target_text(req)}...")
    result = plan(req, price_table)
    folder = write_plan_folder(result, run_dir=run_dir, out=out, now=datetime.now())
    if as_json:
        doc: dict[str, Any] = result.model_dump(mode="json")
        doc["run_dir"] = str(folder)
        typer.echo(json.dumps(doc))
    else:
        _print_plan(req, result, folder)
    if not result.ok:
        raise NoFeasibleConfigError(
            f"no GPU kind meets the SLA for {_target_text(req)}; see {folder / 'plan.csv'}"
        )
